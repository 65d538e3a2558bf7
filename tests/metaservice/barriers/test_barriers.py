"""The barrier protocol's invariants (docs/contract.md#barriers-only-move-forward,
docs/contract.md#only-handed-barriers-only-own-sinks, docs/contract.md#the-barrier-protocol) on both
backends."""

from __future__ import annotations

import httpx

from metaservice.clock import ManualClock
from tests.metaservice.jobs.test_jobs import plan
from tests.metaservice.test_errors import assert_error


def root(client: httpx.Client, table: str, snapshot: int,
         barrier: int | None = None) -> httpx.Response:
    body = {"snapshot_id": snapshot} if barrier is None else {"snapshot_id": snapshot,
                                                              "barrier": barrier}
    return client.post(f"/tables/{table.replace('.', '/')}/barriers", json=body)


def commit(client: httpx.Client, job: str, table: str, barrier: int | None,
           snapshot: int) -> httpx.Response:
    return client.post(f"/commit/{job}/{table.replace('.', '/')}",
                       json={"barrier": barrier, "snapshot_id": snapshot})


def test_root_barrier_is_assigned_from_the_clock(client: httpx.Client, clock: ManualClock) -> None:
    first = root(client, "lake.db.r", 1).json()
    assert first == {"table": "lake.db.r", "barrier": clock.now_ms(), "snapshot_id": 1}
    # The clock did not move: the next barrier is latest + 1.
    assert root(client, "lake.db.r", 2).json()["barrier"] == clock.now_ms() + 1
    clock.advance(5000)
    assert root(client, "lake.db.r", 3).json()["barrier"] == clock.now_ms()


def test_heartbeat_and_regressions(client: httpx.Client) -> None:
    assert root(client, "lake.db.r", 11, 100).status_code == 200
    assert root(client, "lake.db.r", 12, 200).status_code == 200
    # Heartbeat: the latest snapshot completes a newer barrier.
    assert root(client, "lake.db.r", 12, 300).json()["barrier"] == 300
    # Exact repeat: idempotent, same answer.
    assert root(client, "lake.db.r", 12, 200).json() == {"table": "lake.db.r", "barrier": 200,
                                                        "snapshot_id": 12}
    assert_error(root(client, "lake.db.r", 99, 200), 409, "barrier_regression")
    assert_error(root(client, "lake.db.r", 99, 250), 409, "barrier_regression")
    # An older snapshot may not complete a newer barrier.
    assert_error(root(client, "lake.db.r", 11, 400), 409, "barrier_regression")
    history = client.get("/tables/lake/db/r/barriers").json()
    assert [b["barrier"] for b in history["barriers"]] == [300, 200, 100]


def test_root_report_is_refused_when_a_running_job_writes_the_table(client: httpx.Client) -> None:
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    client.post("/jobs/etl/start")
    err = assert_error(root(client, "lake.db.b", 1, 10), 409, "table_has_writer")
    assert err["details"]["writer"] == "etl"


def test_job_commits_only_its_pinned_barrier_to_its_own_sinks(client: httpx.Client) -> None:
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    root(client, "lake.db.a", 1, 10)
    assert client.post("/jobs/etl/start").json()["barrier"] == 10
    assert_error(commit(client, "etl", "lake.db.b", 11, 5), 409, "unknown_barrier")
    assert_error(commit(client, "etl", "lake.db.a", 10, 5), 409, "not_a_sink")
    assert_error(commit(client, "etl", "lake.db.zzz", 10, 5), 404, "unknown_table")
    ok = commit(client, "etl", "lake.db.b", 10, 5)
    assert ok.json() == {"table": "lake.db.b", "barrier": 10, "snapshot_id": 5}
    # An exact repeat after the pin moved is still idempotent.
    assert commit(client, "etl", "lake.db.b", 10, 5).json() == ok.json()
    assert_error(commit(client, "etl", "lake.db.b", 10, 6), 409, "barrier_regression")


def test_next_is_pinned_until_commit_and_handed_out_again_after_abort(
        client: httpx.Client, clock: ManualClock) -> None:
    plan(client, "etl", ["lake.db.a", "lake.db.c"], ["lake.db.b"])
    root(client, "lake.db.a", 1, 10)
    start = client.post("/jobs/etl/start").json()
    assert start["action"] == "wait" and start["retry_after_ms"] > 0
    root(client, "lake.db.c", 7, 15)
    # c has no snapshot completing a barrier <= 10 = min latest: wait until a reaches 15.
    assert client.post("/jobs/etl/barriers/next", json={}).json()["action"] == "wait"
    root(client, "lake.db.a", 1, 15)  # a heartbeat
    step = client.post("/jobs/etl/barriers/next", json={}).json()
    assert step["action"] == "process" and step["barrier"] == 15
    assert step["snapshots"] == {"lake.db.a": 1, "lake.db.c": 7} and step["previous"] is None
    root(client, "lake.db.a", 2, 20)
    root(client, "lake.db.c", 8, 30)
    # Pinned: the same answer whatever `after` says, for every source and every replay.
    assert client.post("/jobs/etl/barriers/next", json={"after": 5}).json() == step
    aborted = client.post("/jobs/etl/barriers/15/abort", json={"reason": "executor lost"})
    assert aborted.json() == {"job": "etl", "barrier": 15, "attempts": 1}
    again = client.post("/jobs/etl/barriers/next", json={}).json()
    assert again["barrier"] == 20 and again["snapshots"] == {"lake.db.a": 2, "lake.db.c": 7}
    clock.advance(250)
    assert commit(client, "etl", "lake.db.b", 20, 100).status_code == 200
    follow = client.post("/jobs/etl/barriers/next", json={"after": 20}).json()
    assert follow["action"] == "wait"
    root(client, "lake.db.a", 3, 40)
    follow = client.post("/jobs/etl/barriers/next", json={"after": 20}).json()
    assert follow["barrier"] == 30
    assert follow["snapshots"] == {"lake.db.a": 2, "lake.db.c": 8}
    assert follow["previous"] == {"lake.db.a": 2, "lake.db.c": 7}
    progress = client.get("/jobs/etl/progress").json()["progress"]
    by_barrier = {p["barrier"]: p for p in progress}
    assert by_barrier[20]["state"] == "committed" and by_barrier[20]["duration_ms"] == 250
    assert by_barrier[20]["committed"] == [{"table": "lake.db.b", "snapshot_id": 100,
                                            "committed_at": by_barrier[20]["finished_at"]}]
    assert by_barrier[15]["state"] == "aborted"
    assert by_barrier[15]["last_abort_reason"] == "executor lost"
    assert by_barrier[30]["state"] == "in_progress"


def test_a_job_without_sources_chooses_or_gets_its_barriers(client: httpx.Client,
                                                            clock: ManualClock) -> None:
    plan(client, "ingest", [], ["lake.db.raw"])
    assert client.post("/jobs/ingest/start").json()["action"] == "none"
    assert commit(client, "ingest", "lake.db.raw", 50, 1).json()["barrier"] == 50
    assigned = client.post("/commit/ingest/lake/db/raw", json={"snapshot_id": 2}).json()
    assert assigned["barrier"] == max(clock.now_ms(), 51)


def test_commit_by_a_stopped_job_is_refused(client: httpx.Client) -> None:
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    root(client, "lake.db.a", 1, 10)
    client.post("/jobs/etl/start")
    client.post("/unregister/etl")
    assert_error(commit(client, "etl", "lake.db.b", 10, 5), 409, "job_not_running")
    assert_error(client.post("/jobs/etl/barriers/next", json={}), 409, "job_not_running")


def test_exact_data_lineage_follows_every_job_upstream(client: httpx.Client) -> None:
    # a -> j1 -> b -> j2 -> c, plus d -> j2.
    plan(client, "j1", ["lake.db.a"], ["lake.db.b"])
    plan(client, "j2", ["lake.db.b", "lake.db.d"], ["lake.db.c"])
    root(client, "lake.db.a", 1, 10)
    root(client, "lake.db.d", 40, 10)
    client.post("/jobs/j1/start")
    commit(client, "j1", "lake.db.b", 10, 100)
    client.post("/jobs/j2/start")
    commit(client, "j2", "lake.db.c", 10, 1000)
    root(client, "lake.db.a", 2, 20)
    root(client, "lake.db.d", 41, 20)
    assert client.post("/jobs/j1/barriers/next", json={"after": 10}).json()["barrier"] == 20
    commit(client, "j1", "lake.db.b", 20, 101)
    assert client.post("/jobs/j2/barriers/next", json={"after": 10}).json()["barrier"] == 20
    commit(client, "j2", "lake.db.c", 20, 1001)
    lineage = client.get("/lineage/lake/db/c/barriers/25").json()
    assert lineage["barrier"] == 20 and lineage["snapshot_id"] == 1001
    assert lineage["writer_job"] == "j2"
    inputs = {i["table"]: i for i in lineage["inputs"]}
    assert inputs["lake.db.d"]["snapshot_id"] == 41 and inputs["lake.db.d"]["inputs"] == []
    assert inputs["lake.db.b"]["snapshot_id"] == 101
    assert inputs["lake.db.b"]["inputs"][0] == {
        "table": "lake.db.a", "requested_barrier": 20, "barrier": 20, "snapshot_id": 2,
        "writer_job": None, "inputs": []}
    assert_error(client.get("/lineage/lake/db/c/barriers/5"), 404, "no_version")
