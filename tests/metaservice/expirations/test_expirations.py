"""Two-phase expiration (docs/contract.md#expired-snapshots-stay-gone,
docs/contract.md#two-phase-expiration) on both backends: what is protected and why, approved
snapshots never handed out or leased again, completion, and readers racing an expiration."""

from __future__ import annotations

import random
import threading
import time

import httpx

from tests.metaservice.barriers.test_barriers import commit, root
from tests.metaservice.jobs.test_jobs import plan
from tests.metaservice.leases.test_leases import expire, history, lease, protected
from tests.metaservice.test_errors import assert_error
from tests.metaservice.worked_examples import spec_chain as worked_example

T = "lake.db.t"


def complete(client: httpx.Client, expiration_id: str, snapshots: list[int]) -> httpx.Response:
    return client.post(f"/expirations/{expiration_id}/complete", json={"snapshot_ids": snapshots})


def explicit(client: httpx.Client, table: str, barrier: int) -> httpx.Response:
    return client.post("/versions", json={"tables": [table], "barrier": barrier})


def test_protection_in_the_worked_example(client: httpx.Client) -> None:
    """table1 → A → table2: table1 {10: 101, 20: 102, 30: 103}, table2 {10: 201, 20: 202}."""
    worked_example(client)
    assert protected(client, "lake.db.table1") == {
        103: ["latest", "job_source:A"],
        102: ["strong_cut", "job_source:A"],  # A committed 20: it reads from 102 on
    }
    assert protected(client, "lake.db.table2") == {202: ["latest", "strong_cut"]}
    assert protected(client, "lake.db.table3") == {301: ["latest", "strong_cut"]}

    answer = expire(client, [101, 102, 103, 404], "lake.db.table1")
    assert answer["table"] == "lake.db.table1"
    assert answer["approved"] == [101]
    assert answer["refused"] == [
        {"snapshot_id": 102, "reason": "strong_cut", "reasons": ["strong_cut", "job_source:A"]},
        {"snapshot_id": 103, "reason": "latest", "reasons": ["latest", "job_source:A"]},
        {"snapshot_id": 404, "reason": "unknown", "reasons": ["unknown"]},
    ]
    assert expire(client, [201], "lake.db.table2")["approved"] == [201]


def test_a_job_protects_what_it_will_read_until_it_stops(client: httpx.Client) -> None:
    """A running job's sources are protected from its last committed barrier to the latest
    (its next step reads the appends in between) and at its pinned barrier."""
    x = history(client, "lake.db.x", count=4)  # barriers 10..40: 101..104
    plan(client, "J", ["lake.db.x"], ["lake.db.y"])
    start = client.post("/jobs/J/start", json={"from": 10}).json()
    assert start["action"] == "process" and start["snapshots"] == {"lake.db.x": x[0]}
    assert protected(client, "lake.db.x") == {
        x[3]: ["latest", "strong_cut", "job_source:J"],  # y has no barrier: not in the cut
        x[2]: ["job_source:J"], x[1]: ["job_source:J"], x[0]: ["job_source:J"]}
    assert commit(client, "J", "lake.db.y", 10, 900).status_code == 200
    # Committed 10 (y is catching up to the cut 40): J will read x from 10 on.
    assert protected(client, "lake.db.x")[x[0]] == ["job_source:J"]
    step = client.post("/jobs/J/barriers/next", json={"after": 10}).json()
    assert step["barrier"] == 40 and step["previous"] == {"lake.db.x": x[0]}
    assert expire(client, x, "lake.db.x")["approved"] == []

    assert client.post("/unregister/J").status_code == 200
    # Alone again, x's strong cut is its latest; the history the job needed is free.
    assert protected(client, "lake.db.x") == {x[3]: ["latest", "strong_cut"]}
    assert expire(client, x, "lake.db.x")["approved"] == x[:3]


def test_approved_snapshots_are_never_handed_out_or_leased(client: httpx.Client) -> None:
    s1, s2, s3 = history(client)
    answer = expire(client, [s1])
    assert answer["approved"] == [s1]
    for barrier in (10, 15):  # snap(T, 15) is s1 too
        error = assert_error(explicit(client, T, barrier), 410, "snapshot_expired")
        assert error["details"]["snapshots"] == [{"table": T, "snapshot_id": s1}]
    assert explicit(client, T, 20).json()["versions"][T]["snapshot_id"] == s2
    assert_error(lease(client, [s1]), 410, "snapshot_expired")
    assert client.get("/version/strong/lake/db/t").json()["snapshot_id"] == s3

    # Completed: still never handed out, and not approved a second time.
    assert complete(client, answer["expiration_id"], [s1]).status_code == 200
    assert_error(explicit(client, T, 10), 410, "snapshot_expired")
    again = expire(client, [s1])
    assert again["approved"] == [] and again["refused"][0]["reason"] == "already_expired"


def test_completion_records_what_was_really_deleted(client: httpx.Client) -> None:
    s1, s2, s3, s4 = history(client, count=4)
    first = expire(client, [s1, s2, s3])
    assert first["approved"] == [s1, s2, s3]
    done = complete(client, first["expiration_id"], [s1])
    assert done.status_code == 200, done.text
    assert done.json()["expired"] == [s1] and done.json()["approved"] == [s2, s3]
    assert done.json()["completed_at"] is not None
    # Repeating a completion is harmless; an id never approved is refused, nothing changes.
    assert complete(client, first["expiration_id"], [s1]).json() == done.json()
    error = assert_error(complete(client, first["expiration_id"], [s2, 9999]), 409,
                         "snapshot_not_approved")
    assert error["details"]["snapshot_ids"] == [9999]
    assert client.get(f"/expirations/{first['expiration_id']}").json()["approved"] == [s2, s3]

    # Left approved (the tool may have deleted some files): still never handed out, and a later
    # expiration takes them over.
    assert_error(explicit(client, T, 20), 410, "snapshot_expired")
    second = expire(client, [s2, s3])
    assert second["approved"] == [s2, s3]
    assert complete(client, second["expiration_id"], [s2, s3]).json()["expired"] == [s2, s3]
    state = client.get(f"/expirations/{first['expiration_id']}").json()
    assert state["approved"] == [] and state["expired"] == [s1]
    assert_error(complete(client, "no-such-expiration", [s1]), 404, "unknown_expiration")
    assert_error(client.get("/expirations/no-such-expiration"), 404, "unknown_expiration")


def test_unknown_snapshots_are_approved_only_on_request(client: httpx.Client) -> None:
    history(client)
    assert expire(client, [777])["refused"][0]["reason"] == "unknown"
    answer = client.post("/tables/lake/db/t/expirations",
                         json={"snapshot_ids": [777], "approve_unknown": True}).json()
    assert answer["approved"] == [777]


def test_expiration_requests_are_validated(client: httpx.Client) -> None:
    assert_error(client.post("/tables/lake/db/nowhere/expirations", json={"snapshot_ids": [1]}),
                 404, "unknown_table")
    assert_error(client.get("/tables/lake/db/nowhere/snapshots/protected"), 404, "unknown_table")
    assert_error(client.post("/tables/lake/db/t/expirations", json={"snapshot_ids": "x"}), 422,
                 "invalid_request")
    assert_error(client.post("/tables/lake/db/t/expirations", json={"ids": []}), 422,
                 "invalid_request")


def test_start_and_next_never_hand_out_an_approved_snapshot(client: httpx.Client) -> None:
    """x {10}, y {10, 20, 30}: y's older snapshots are approved before job J (reading both)
    starts. J's barriers would land on them: it waits until x moves past them."""
    (x1,) = history(client, "lake.db.x", count=1, base=100)
    y1, y2, y3 = history(client, "lake.db.y", count=3, base=200)
    assert expire(client, [y1, y2], "lake.db.y")["approved"] == [y1, y2]
    plan(client, "J", ["lake.db.x", "lake.db.y"], ["lake.db.z"])
    start = client.post("/jobs/J/start", json={"from": "latest"}).json()
    assert start["action"] == "wait" and start["reason"] == "snapshot_expired"
    nxt = client.post("/jobs/J/barriers/next", json={}).json()
    assert nxt["action"] == "wait" and nxt["reason"] == "snapshot_expired"
    assert root(client, "lake.db.x", 102, 20).status_code == 200
    assert client.post("/jobs/J/barriers/next", json={}).json()["action"] == "wait"
    assert root(client, "lake.db.x", 103, 30).status_code == 200
    step = client.post("/jobs/J/barriers/next", json={}).json()
    assert step["action"] == "process" and step["barrier"] == 30
    assert step["snapshots"] == {"lake.db.x": 103, "lake.db.y": y3}

    plan(client, "K", ["lake.db.x", "lake.db.y"], ["lake.db.k"])
    assert_error(client.post("/jobs/K/start", json={"from": 10}), 410, "snapshot_expired")
    plan(client, "E", ["lake.db.x", "lake.db.y"], ["lake.db.e"])
    earliest = client.post("/jobs/E/start", json={"from": "earliest"}).json()
    assert earliest["action"] == "process" and earliest["barrier"] == 30  # y's retained history
    assert x1 == 101


def test_readers_never_receive_a_snapshot_approved_before_they_asked(
        client: httpx.Client) -> None:
    """A writer keeps adding root snapshots and approving older ones while readers ask for
    versions, some leased. A reader never gets a snapshot whose approval was answered before it
    sent its request, and no snapshot is both leased and approved."""
    url = str(client.base_url)
    approved_at: dict[int, float] = {}  # snapshot → when its approval answer arrived
    reported: list[int] = []
    leased: set[int] = set()
    reads: list[tuple[float, int]] = []
    lock = threading.Lock()
    done = threading.Event()
    errors: list[str] = []

    for i in range(1, 4):
        assert root(client, T, 5_000 + i, i * 10).status_code == 200
        reported.append(i * 10)

    def writer() -> None:
        try:
            with httpx.Client(base_url=url, timeout=30) as http:
                for i in range(4, 40):
                    assert root(http, T, 5_000 + i, i * 10).status_code == 200
                    with lock:
                        reported.append(i * 10)
                    answer = expire(http, [5_000 + i - 2, 5_000 + i - 3])
                    now = time.monotonic()
                    with lock:
                        for s in answer["approved"]:
                            approved_at.setdefault(s, now)
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))
        finally:
            done.set()

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with httpx.Client(base_url=url, timeout=30) as http:
                while not done.is_set():
                    with lock:
                        barrier = rng.choice(reported)
                    body: dict = {"tables": [T], "barrier": barrier}
                    if rng.random() < 0.3:
                        body["lease_seconds"] = 600
                    sent = time.monotonic()
                    answer = http.post("/versions", json=body)
                    if answer.status_code == 410:
                        continue
                    assert answer.status_code == 200, answer.text
                    snapshot = answer.json()["versions"][T]["snapshot_id"]
                    with lock:
                        reads.append((sent, snapshot))
                        if "lease_seconds" in body:
                            leased.add(snapshot)
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert approved_at, "the writer approved nothing"
    assert reads, "no reader got an answer"
    for sent, snapshot in reads:
        assert snapshot not in approved_at or approved_at[snapshot] > sent, (
            f"snapshot {snapshot} was handed out after its approval was answered")
    assert not (leased & set(approved_at)), "a snapshot was both leased and approved"
