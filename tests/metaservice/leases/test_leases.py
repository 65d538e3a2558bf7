"""Snapshot leases (docs/contract.md#leases) on both backends: terms from the injectable clock, what
they protect, and a lease racing an approval of the same snapshot over the real loopback server."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import func, select, update

from benchmarks._environment import ServerThread
from metaservice.app import create_app
from metaservice.auth.policy import Role
from metaservice.auth.service import create_token
from metaservice.clock import ManualClock
from metaservice.db.models import LeaseRow
from metaservice.db.session import Database
from metaservice.settings import Settings
from tests.metaservice.auth.test_auth import auth, secured  # noqa: F401 - a fixture
from tests.metaservice.barriers.test_barriers import root
from tests.metaservice.test_errors import assert_error
from tests.metaservice.test_replicas import two_servers  # noqa: F401 - a fixture

T = "lake.db.t"


def history(client: httpx.Client, table: str = T, count: int = 3, base: int = 100) -> list[int]:
    """Root barriers 10, 20, ... completed by snapshots base+1, base+2, ...; returns them."""
    snapshots = [base + i for i in range(1, count + 1)]
    for i, snapshot in enumerate(snapshots, start=1):
        assert root(client, table, snapshot, 10 * i).status_code == 200
    return snapshots


def lease(client: httpx.Client, snapshots: list[int], *, table: str = T, ttl: float = 60,
          holder: str = "query-1") -> httpx.Response:
    return client.post("/leases", json={
        "holder": holder, "ttl_seconds": ttl,
        "snapshots": [{"table": table, "snapshot_id": s} for s in snapshots]})


def expire(client: httpx.Client, snapshots: list[int], table: str = T) -> dict:
    response = client.post(f"/tables/{table.replace('.', '/')}/expirations",
                           json={"snapshot_ids": snapshots})
    assert response.status_code == 201, response.text
    return response.json()


def protected(client: httpx.Client, table: str = T) -> dict[int, list[str]]:
    response = client.get(f"/tables/{table.replace('.', '/')}/snapshots/protected")
    assert response.status_code == 200, response.text
    return {p["snapshot_id"]: p["reasons"] for p in response.json()["snapshots"]}


def test_lease_lifecycle(client: httpx.Client, clock: ManualClock) -> None:
    s1, s2, _ = history(client)
    created = lease(client, [s1, s2], ttl=60)
    assert created.status_code == 201, created.text
    body = created.json()
    lease_id = body["lease_id"]
    assert body["expires_at"] == clock.now_ms() + 60_000
    assert body["holder"] == "query-1" and body["expired"] is False
    assert body["snapshots"] == [{"table": T, "snapshot_id": s1}, {"table": T, "snapshot_id": s2}]

    listed = client.get("/leases", params={"table": T}).json()["leases"]
    assert [x["lease_id"] for x in listed] == [lease_id]
    assert client.get("/leases", params={"holder": "query-1"}).json()["leases"] == listed
    assert client.get("/leases", params={"holder": "someone-else"}).json()["leases"] == []
    assert client.get("/leases", params={"table": "lake.db.other"}).json()["leases"] == []
    assert client.get(f"/leases/{lease_id}").json() == body

    clock.advance(30_000)
    renewed = client.post(f"/leases/{lease_id}/renew", json={"ttl_seconds": 120})
    assert renewed.status_code == 200, renewed.text
    assert renewed.json()["expires_at"] == clock.now_ms() + 120_000
    # Without a TTL a renewal grants the original term again; an empty body is allowed.
    assert client.post(f"/leases/{lease_id}/renew").json()["expires_at"] == clock.now_ms() + 60_000

    assert client.delete(f"/leases/{lease_id}").status_code == 204
    assert_error(client.delete(f"/leases/{lease_id}"), 404, "unknown_lease")
    assert_error(client.post(f"/leases/{lease_id}/renew"), 404, "unknown_lease")
    assert client.get("/leases").json()["leases"] == []


def test_a_live_lease_protects_and_an_expired_one_does_not(client: httpx.Client,
                                                           clock: ManualClock) -> None:
    s1, s2, s3 = history(client)
    lease_id = lease(client, [s1], ttl=10).json()["lease_id"]
    assert protected(client)[s1] == [f"lease:{lease_id}"]
    refused = expire(client, [s1])
    assert refused["approved"] == []
    assert refused["refused"] == [{"snapshot_id": s1, "reason": f"lease:{lease_id}",
                                   "reasons": [f"lease:{lease_id}"]}]

    clock.advance(9_999)
    assert expire(client, [s1])["approved"] == []
    clock.advance(1)  # the term is over: the lease protects nothing any more
    assert s1 not in protected(client)
    assert client.get("/leases").json()["leases"] == []
    assert client.get(f"/leases/{lease_id}").json()["expired"] is True
    assert_error(client.post(f"/leases/{lease_id}/renew"), 410, "lease_expired")
    assert expire(client, [s1])["approved"] == [s1]


def test_expired_leases_are_forgotten_after_an_hour(client: httpx.Client,
                                                    clock: ManualClock) -> None:
    s1, _, _ = history(client)
    old = lease(client, [s1], ttl=1).json()["lease_id"]
    clock.advance(3_600_000 + 1_001)
    assert lease(client, [s1], ttl=1).status_code == 201  # creating a lease purges old ones
    assert_error(client.get(f"/leases/{old}"), 404, "unknown_lease")


def test_lease_refusals(client: httpx.Client) -> None:
    s1, s2, s3 = history(client)
    error = assert_error(lease(client, [s1, 999]), 404, "unknown_snapshot")
    assert error["details"]["snapshots"] == [{"table": T, "snapshot_id": 999}]
    assert_error(lease(client, [s1], table="lake.db.nowhere"), 404, "unknown_table")
    assert_error(lease(client, [s1], ttl=0), 422, "invalid_request")
    assert_error(lease(client, [s1], ttl=8 * 24 * 3600), 422, "invalid_request")
    assert_error(lease(client, []), 422, "invalid_request")

    assert expire(client, [s1])["approved"] == [s1]
    error = assert_error(lease(client, [s1, s2]), 410, "snapshot_expired")
    assert error["details"]["snapshots"] == [{"table": T, "snapshot_id": s1}]
    assert client.get("/leases").json()["leases"] == []  # nothing was leased


def test_versions_with_lease_seconds_lease_what_they_answer(client: httpx.Client,
                                                            clock: ManualClock) -> None:
    s1, s2, s3 = history(client)
    answer = client.post("/versions", json={"tables": [T], "barrier": 20, "lease_seconds": 30,
                                            "holder": "dashboard"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["versions"] == {T: {"barrier": 20, "snapshot_id": s2, "snapshot_barrier": 20}}
    assert body["expires_at"] == clock.now_ms() + 30_000
    held = client.get(f"/leases/{body['lease_id']}").json()
    assert held["holder"] == "dashboard"
    assert held["snapshots"] == [{"table": T, "snapshot_id": s2}]
    assert protected(client)[s2] == [f"lease:{body['lease_id']}"]
    assert expire(client, [s1, s2])["approved"] == [s1]

    # Without lease_seconds nothing is leased and the answer has no lease fields.
    plain = client.post("/versions", json={"tables": [T], "consistency": "weak"}).json()
    assert plain == {"consistency": "weak", "versions": {T: {"barrier": 30, "snapshot_id": s3,
                                                                   "snapshot_barrier": 30}}}
    # A leased read of an approved snapshot is refused and leases nothing.
    assert_error(client.post("/versions", json={"tables": [T], "barrier": 10,
                                                "lease_seconds": 30}), 410, "snapshot_expired")
    assert [x["lease_id"] for x in client.get("/leases").json()["leases"]] == [body["lease_id"]]


def test_versions_answers_match_their_documented_model(client: httpx.Client) -> None:
    """``/versions`` is serialised without FastAPI's response-model validation."""
    from metaservice.versions.schemas import VersionsOut

    history(client)
    for body in ({"tables": [T]}, {"tables": [T], "consistency": "weak"},
                 {"tables": [T], "barrier": 20, "lease_seconds": 30, "holder": "h"}):
        answer = client.post("/versions", json=body)
        assert answer.status_code == 200, answer.text
        VersionsOut.model_validate(answer.json(), strict=True)


def test_renewal_of_a_lapsed_lease_is_refused(client: httpx.Client, clock: ManualClock) -> None:
    """A lease renewed after its term is refused even when no approval took its snapshots."""
    s1, _, _ = history(client)
    lease_id = lease(client, [s1], ttl=5).json()["lease_id"]
    clock.advance(5_000)
    assert_error(client.post(f"/leases/{lease_id}/renew", json={"ttl_seconds": 60}), 410,
                 "lease_expired")


def _race(lessee: httpx.Client, approver: httpx.Client, snapshot: int,
          holder: str) -> tuple[httpx.Response, httpx.Response]:
    """A lease and an approval of ``snapshot``, released at the same moment from two threads."""
    start = threading.Barrier(2)
    results: dict[str, httpx.Response] = {}

    def take_lease() -> None:
        start.wait()
        results["lease"] = lease(lessee, [snapshot], holder=holder)

    def approve() -> None:
        start.wait()
        results["approval"] = approver.post(f"/tables/{T.replace('.', '/')}/expirations",
                                            json={"snapshot_ids": [snapshot]})

    threads = [threading.Thread(target=take_lease), threading.Thread(target=approve)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results["lease"], results["approval"]


def _race_rounds(reporter: httpx.Client, lessee: httpx.Client, approver: httpx.Client,
                 rounds: int) -> dict[str, int]:
    """Each round: a new snapshot, no longer the latest, is leased by one thread while another
    asks to expire it. Exactly one wins: the lease (and the approval names it) or the approval
    (and the lease is 410)."""
    outcomes = {"lease": 0, "approval": 0}
    client = reporter
    for i in range(rounds):
        target, newer = 10_000 + 2 * i, 10_001 + 2 * i
        assert root(client, T, target, 1_000 + 2 * i).status_code == 200
        assert root(client, T, newer, 1_001 + 2 * i).status_code == 200
        leased, approval = _race(lessee, approver, target, f"race-{i}")
        assert approval.status_code == 201, approval.text
        approved = target in approval.json()["approved"]
        if leased.status_code == 201:
            assert not approved, f"round {i}: both the lease and the approval won"
            lease_id = leased.json()["lease_id"]
            assert approval.json()["refused"][0]["reason"] == f"lease:{lease_id}"
            outcomes["lease"] += 1
        else:
            assert_error(leased, 410, "snapshot_expired")
            assert approved, f"round {i}: neither won"
            outcomes["approval"] += 1
    assert sum(outcomes.values()) == rounds
    return outcomes


def test_a_lease_racing_an_approval_exactly_one_wins(client: httpx.Client) -> None:
    """Many rounds, both requests released at once over the real loopback server."""
    with (httpx.Client(base_url=str(client.base_url), timeout=30) as lessee,
          httpx.Client(base_url=str(client.base_url), timeout=30) as approver):
        _race_rounds(client, lessee, approver, rounds=40)


def test_a_lease_and_an_approval_on_two_server_processes(two_servers: list[str]) -> None:  # noqa: F811
    """The same race with the lease sent to one server process and the approval to another
    sharing the database: the database, not a process, decides."""
    first, second = two_servers
    with (httpx.Client(base_url=first, timeout=30) as lessee,
          httpx.Client(base_url=second, timeout=30) as approver):
        _race_rounds(lessee, lessee, approver, rounds=30)


# -- ownership (docs/contract.md#leases): a lease belongs to the principal that took it ------------


@pytest.fixture
def principals(secured: tuple, database: Database, clock: ManualClock) -> dict[str, dict]:  # noqa: F811
    """Authorization headers of a reader, a second reader, a writer and an admin."""
    _, _, tokens = secured
    with database.transaction(write=True) as session:
        reader2 = create_token(session, "t-reader2", Role.reader, clock.now_ms()).token
    return {"reader": auth(tokens[Role.reader]), "reader2": auth(reader2),
            "writer": auth(tokens[Role.writer]), "admin": auth(tokens[Role.admin])}


def _ids(http: httpx.Client, headers: dict) -> set[str]:
    response = http.get("/leases", headers=headers)
    assert response.status_code == 200, response.text
    return {x["lease_id"] for x in response.json()["leases"]}


def _protected_reasons(http: httpx.Client, headers: dict, snapshot: int) -> list[str]:
    response = http.get(f"/tables/{T.replace('.', '/')}/snapshots/protected", headers=headers)
    assert response.status_code == 200, response.text
    return next(p["reasons"] for p in response.json()["snapshots"]
                if p["snapshot_id"] == snapshot)


def test_leases_are_seen_renewed_and_released_only_by_their_principal_or_an_admin(
        secured: tuple, principals: dict[str, dict]) -> None:  # noqa: F811
    _, http, _ = secured
    for i, snapshot in enumerate((101, 102, 103), start=1):
        assert http.post(f"/tables/{T.replace('.', '/')}/barriers", headers=principals["writer"],
                         json={"snapshot_id": snapshot, "barrier": 10 * i}).status_code == 200
    taken = http.post("/leases", headers=principals["reader"], json={
        "holder": "query-1", "ttl_seconds": 60, "snapshots": [{"table": T, "snapshot_id": 101}]})
    assert taken.status_code == 201, taken.text
    mine = taken.json()["lease_id"]
    # A lease taken by POST /versions belongs to its caller too.
    read = http.post("/versions", headers=principals["writer"],
                     json={"tables": [T], "barrier": 20, "lease_seconds": 60})
    assert read.status_code == 200, read.text
    writers = read.json()["lease_id"]

    assert _ids(http, principals["reader"]) == {mine}
    assert _ids(http, principals["writer"]) == {writers}
    assert _ids(http, principals["reader2"]) == set()
    assert _ids(http, principals["admin"]) == {mine, writers}
    assert http.get("/leases", headers=principals["reader2"],
                    params={"holder": "query-1"}).json()["leases"] == []

    # To another principal, of any role short of admin, the lease does not exist.
    for other in ("reader2", "writer"):
        headers = principals[other]
        assert_error(http.get(f"/leases/{mine}", headers=headers), 404, "unknown_lease")
        assert_error(http.post(f"/leases/{mine}/renew", headers=headers), 404, "unknown_lease")
        assert_error(http.delete(f"/leases/{mine}", headers=headers), 404, "unknown_lease")
    assert_error(http.get(f"/leases/{writers}", headers=principals["reader"]), 404,
                 "unknown_lease")
    # The protection stays visible, without the id of a lease the caller may not see.
    assert _protected_reasons(http, principals["reader2"], 101) == ["lease"]
    assert _protected_reasons(http, principals["reader"], 101) == [f"lease:{mine}"]
    assert _protected_reasons(http, principals["admin"], 102) == [f"lease:{writers}"]
    assert _protected_reasons(http, principals["reader"], 102) == ["lease"]

    # Its principal renews, reads and releases it; an admin does so with any lease.
    assert http.get(f"/leases/{mine}", headers=principals["reader"]).status_code == 200
    assert http.post(f"/leases/{mine}/renew", headers=principals["reader"]).status_code == 200
    assert http.delete(f"/leases/{mine}", headers=principals["reader"]).status_code == 204
    assert http.get(f"/leases/{writers}", headers=principals["admin"]).status_code == 200
    assert http.post(f"/leases/{writers}/renew", headers=principals["admin"]).status_code == 200
    assert http.delete(f"/leases/{writers}", headers=principals["admin"]).status_code == 204
    assert _ids(http, principals["admin"]) == set()


# -- bounds (docs/contract.md#leases): live leases per principal, and a lease's term ---------------

CAP = 3
MAX_TERM = 600


@pytest.fixture
def capped(database: Database, database_url: str,
           clock: ManualClock) -> Iterator[tuple[httpx.Client, dict[str, dict]]]:
    """A server with authentication, at most ``CAP`` live leases per principal and terms of at
    most ``MAX_TERM`` s; the headers of two readers and a writer; barriers 10, 20 and 30 of
    ``T`` complete (snapshots 101, 102, 103)."""
    settings = Settings(database_url=database_url, auth="required", max_leases=CAP,
                        max_lease_seconds=MAX_TERM)
    app = create_app(settings, clock=clock, database=database)
    with database.transaction(write=True) as session:
        headers = {name: auth(create_token(session, f"t-{name}", role, clock.now_ms()).token)
                   for name, role in (("reader", Role.reader), ("reader2", Role.reader),
                                      ("writer", Role.writer))}
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        for i, snapshot in enumerate((101, 102, 103), start=1):
            assert http.post(f"/tables/{T.replace('.', '/')}/barriers", headers=headers["writer"],
                             json={"snapshot_id": snapshot, "barrier": 10 * i}).status_code == 200
        yield http, headers


def _take(http: httpx.Client, headers: dict, ttl: float = 60) -> httpx.Response:
    return http.post("/leases", headers=headers, json={
        "holder": "q", "ttl_seconds": ttl, "snapshots": [{"table": T, "snapshot_id": 101}]})


def test_a_principal_holds_at_most_max_leases_live_leases(
        capped: tuple[httpx.Client, dict[str, dict]], clock: ManualClock) -> None:
    http, headers = capped
    reader = headers["reader"]
    taken = [_take(http, reader) for _ in range(CAP - 1)]
    assert [t.status_code for t in taken] == [201] * (CAP - 1), [t.text for t in taken]
    versions = http.post("/versions", headers=reader,
                         json={"tables": [T], "barrier": 20, "lease_seconds": 60})
    assert versions.status_code == 200, versions.text  # POST /versions' leases count too
    refused = _take(http, reader)
    error = assert_error(refused, 429, "too_many_leases")
    assert error["details"] == {"limit": CAP}
    assert "DELETE /leases/" in error["message"]
    assert "METASERVICE_MAX_LEASES" in error["message"]
    assert_error(http.post("/versions", headers=reader,
                           json={"tables": [T], "barrier": 20, "lease_seconds": 60}),
                 429, "too_many_leases")
    # The cap is per principal; a release or an expiry makes room again.
    assert _take(http, headers["reader2"]).status_code == 201
    assert http.delete(f"/leases/{taken[0].json()['lease_id']}",
                       headers=reader).status_code == 204
    assert _take(http, reader).status_code == 201
    assert_error(_take(http, reader), 429, "too_many_leases")
    clock.advance(61_000)
    assert [_take(http, reader).status_code for _ in range(CAP)] == [201] * CAP


def test_the_lease_cap_holds_when_requests_race(
        capped: tuple[httpx.Client, dict[str, dict]], database: Database) -> None:
    """Many leases asked for at once by one principal: exactly the cap is granted."""
    http, headers = capped
    count = 4 * CAP
    start = threading.Barrier(count)
    answers: list[int] = []

    def take() -> None:
        with httpx.Client(base_url=str(http.base_url), timeout=30) as own:
            own.get("/healthz")  # connected before the start
            start.wait(timeout=30)
            answers.append(_take(own, headers["reader"]).status_code)

    threads = [threading.Thread(target=take) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(answers) == [201] * CAP + [429] * (count - CAP), answers
    with database.engine.connect() as connection:
        held = connection.scalar(select(func.count()).select_from(LeaseRow).where(
            LeaseRow.principal == "t-reader"))
    assert held == CAP


def test_a_leases_term_is_bounded_at_creation_and_renewal(
        capped: tuple[httpx.Client, dict[str, dict]], clock: ManualClock,
        database: Database) -> None:
    http, headers = capped
    reader = headers["reader"]
    too_long = assert_error(_take(http, reader, ttl=MAX_TERM + 1), 422, "lease_term_too_long")
    assert too_long["details"] == {"ttl_seconds": MAX_TERM + 1, "max_lease_seconds": MAX_TERM}
    assert "METASERVICE_MAX_LEASE_SECONDS" in too_long["message"]
    assert_error(http.post("/versions", headers=reader, json={
        "tables": [T], "barrier": 20, "lease_seconds": MAX_TERM + 1}), 422, "lease_term_too_long")
    taken = _take(http, reader, ttl=MAX_TERM)
    assert taken.status_code == 201, taken.text
    lease_id = taken.json()["lease_id"]
    assert taken.json()["expires_at"] == clock.now_ms() + MAX_TERM * 1000
    assert_error(http.post(f"/leases/{lease_id}/renew", headers=reader,
                           json={"ttl_seconds": MAX_TERM + 1}), 422, "lease_term_too_long")
    # A lease granted a longer term under an earlier setting is renewed for the maximum only.
    with database.engine.begin() as connection:
        connection.execute(update(LeaseRow).where(LeaseRow.id == lease_id)
                           .values(ttl_ms=7 * 86_400_000))
    renewed = http.post(f"/leases/{lease_id}/renew", headers=reader)
    assert renewed.status_code == 200, renewed.text
    assert renewed.json()["expires_at"] == clock.now_ms() + MAX_TERM * 1000
