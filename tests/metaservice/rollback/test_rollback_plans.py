"""Rollback plans (docs/contract.md#rollback-plans) on a diamond, over the real HTTP API.

    a (root) ──j1──▶ b ──┐
      └──────j2──▶ c ────┴──j3──▶ d

Barriers 10, 20, 30, 40 on a; j1 committed all four, j2 committed up to 30 and holds 40,
j3 committed up to 30 and waits. The rollback revises a at barrier 20.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy import select

from metaservice.db.models import ExpirationRow, SnapshotExpirationRow, TableRow
from metaservice.db.session import Database
from tests.metaservice.test_errors import assert_error

SNAP = {"a": 100, "b": 200, "c": 300, "d": 400}


def _ok(response: httpx.Response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


def root(client: httpx.Client, barrier: int, snapshot: int | None = None) -> httpx.Response:
    return client.post("/tables/lake/db/a/barriers",
                       json={"snapshot_id": snapshot or SNAP["a"] + barrier // 10,
                             "barrier": barrier})


def commit(client: httpx.Client, job: str, table: str, barrier: int) -> httpx.Response:
    return client.post(f"/commit/{job}/lake/db/{table}",
                       json={"barrier": barrier, "snapshot_id": SNAP[table] + barrier // 10})


def next_(client: httpx.Client, job: str, after: int | None) -> dict:
    return _ok(client.post(f"/jobs/{job}/barriers/next", json={"after": after}))


def _diamond(client: httpx.Client) -> None:
    for job, sources, sinks in (("j1", "a", "b"), ("j2", "a", "c"), ("j3", "bc", "d")):
        for s in sources:
            _ok(client.post(f"/register/source/{job}/lake/db/{s}"))
        _ok(client.post(f"/register/sink/{job}/lake/db/{sinks}"))
    _ok(root(client, 10))
    for job, sink in (("j1", "b"), ("j2", "c"), ("j3", "d")):
        assert _ok(client.post(f"/jobs/{job}/start"))["barrier"] == 10
        _ok(commit(client, job, sink, 10))
    for barrier in (20, 30):
        _ok(root(client, barrier))
        for job, sink in (("j1", "b"), ("j2", "c"), ("j3", "d")):
            assert next_(client, job, barrier - 10)["barrier"] == barrier
            _ok(commit(client, job, sink, barrier))
    _ok(root(client, 40))
    assert next_(client, "j1", 30)["barrier"] == 40
    _ok(commit(client, "j1", "b", 40))
    assert next_(client, "j2", 30)["barrier"] == 40          # held, not committed
    assert next_(client, "j3", 30)["action"] == "wait"        # c is still at 30


def _expire(database: Database, table: str, snapshot_id: int, state: str = "approved") -> None:
    with database.transaction(write=True) as session:
        table_id = session.scalar(select(TableRow.id).where(TableRow.name == table))
        expiration = ExpirationRow(id=str(uuid.uuid4()), table_id=table_id, requested_at=1)
        session.add(expiration)
        session.flush()
        session.add(SnapshotExpirationRow(table_id=table_id, snapshot_id=snapshot_id,
                                          expiration_id=expiration.id, state=state,
                                          approved_at=1))


def _plan(client: httpx.Client, barrier: int = 20) -> dict:
    return _ok(client.post("/rollback-plans", json={"table": "lake.db.a", "barrier": barrier}),
               201)


def test_plan_lists_targets_invalid_barriers_and_jobs(client: httpx.Client) -> None:
    _diamond(client)
    plan = _plan(client)
    assert plan["state"] == "planned" and plan["mode"] == "incremental" and plan["reason"] is None
    tables = {t["table"]: t for t in plan["tables"]}
    assert {n: (t["relation"], t["distance"], t["target"]["snapshot_id"], t["invalid_barriers"])
            for n, t in tables.items()} == {
        "lake.db.a": ("revised", 0, 102, [30, 40]),
        "lake.db.b": ("downstream", 1, 202, [30, 40]),
        "lake.db.c": ("downstream", 1, 302, [30]),
        "lake.db.d": ("downstream", 2, 402, [30]),
    }
    jobs = {j["job"]: j for j in plan["jobs"]}
    assert {n: (j["restarts"], j["restart_after"], j["aborted_barrier"])
            for n, j in jobs.items()} == {
        "j1": (True, 20, 40), "j2": (True, 20, 40), "j3": (True, 20, 30)}
    assert _ok(client.get(f"/rollback-plans/{plan['id']}")) == plan
    # Nothing changed yet.
    assert _ok(client.get("/version/weak/lake/db/a"))["barrier"] == 40


def test_an_expired_target_makes_the_plan_full_with_the_reason(
        client: httpx.Client, database: Database) -> None:
    _diamond(client)
    _expire(database, "c", 302)
    plan = _plan(client)
    assert plan["mode"] == "full"
    assert "lake.db.c" in plan["reason"] and "302" in plan["reason"]
    c = next(t for t in plan["tables"] if t["table"] == "lake.db.c")
    assert c["target_available"] is False and "approved" in c["unavailable_reason"]
    assert all(t["target_available"] for t in plan["tables"] if t["table"] != "lake.db.c")


def test_no_snapshot_at_or_before_the_barrier_makes_the_plan_full(client: httpx.Client) -> None:
    _diamond(client)
    plan = _plan(client, barrier=5)
    assert plan["mode"] == "full"
    assert all(t["target"] is None for t in plan["tables"])
    assert {j["restart_after"] for j in plan["jobs"]} == {None}


def test_apply_takes_the_barriers_back_everywhere(client: httpx.Client) -> None:
    _diamond(client)
    assert _ok(client.get("/version/strong/lake/db/d"))["barrier"] == 30
    plan = _plan(client)
    applied = _ok(client.post(f"/rollback-plans/{plan['id']}/apply"))
    assert applied["state"] == "applied" and applied["mode"] == "incremental"
    assert _ok(client.post(f"/rollback-plans/{plan['id']}/apply")) == applied   # idempotent

    # Versions: the strong cut moved back (only a rollback may do that); nothing above 20.
    for table, snapshot in (("a", 102), ("b", 202), ("c", 302), ("d", 402)):
        assert _ok(client.get(f"/version/strong/lake/db/{table}")) == {
            "table": f"lake.db.{table}", "consistency": "strong", "barrier": 20,
            "snapshot_id": snapshot, "snapshot_barrier": 20}
        assert _ok(client.get(f"/version/weak/lake/db/{table}"))["barrier"] == 20
    assert_error(client.post("/versions", json={"tables": ["lake.db.a"], "barrier": 30}),
           409, "barrier_not_complete")
    history = _ok(client.get("/tables/lake/db/b/barriers"))
    assert history["latest_barrier"] == 20
    assert {b["barrier"]: b["rolled_back"] for b in history["barriers"]} == {
        40: True, 30: True, 20: False, 10: False}

    # While the plan is applied the tables are fenced: nothing is written, jobs are told to
    # abort, then wait.
    assert_error(root(client, 50), 409, "rollback_in_progress")
    assert_error(commit(client, "j2", "c", 40), 409, "rollback_in_progress")
    assert next_(client, "j1", 40) == {
        "action": "abort", "barrier": 40, "restart_after": 20,
        "reason": f"rolled back: lake.db.a revised at barrier 20 (plan {plan['id']})"}
    assert next_(client, "j1", 40)["action"] == "wait"
    assert next_(client, "j2", 40)["action"] == "abort"
    assert next_(client, "j3", 30)["action"] == "abort"
    assert _ok(client.get("/jobs/j1"))["last_committed_barrier"] == 20

    completed = _ok(client.post(f"/rollback-plans/{plan['id']}/complete"))
    assert completed["state"] == "completed"

    # The revised data arrives; jobs restart after 20 even when they ask with a stale `after`,
    # and read exactly the increment from the snapshot at 20.
    _ok(root(client, 30, snapshot=113))
    step = next_(client, "j1", 40)
    assert step == {"action": "process", "barrier": 30, "snapshots": {"lake.db.a": 113},
                    "previous": {"lake.db.a": 102}}
    _ok(client.post("/commit/j1/lake/db/b", json={"barrier": 30, "snapshot_id": 213}))
    assert next_(client, "j2", 30)["barrier"] == 30          # its last commit, taken back
    _ok(client.post("/commit/j2/lake/db/c", json={"barrier": 30, "snapshot_id": 313}))
    step = next_(client, "j3", 30)
    assert step["barrier"] == 30
    assert step["snapshots"] == {"lake.db.b": 213, "lake.db.c": 313}
    assert step["previous"] == {"lake.db.b": 202, "lake.db.c": 302}
    _ok(client.post("/commit/j3/lake/db/d", json={"barrier": 30, "snapshot_id": 413}))
    assert _ok(client.get("/version/strong/lake/db/d")) == {
        "table": "lake.db.d", "consistency": "strong", "barrier": 30, "snapshot_id": 413,
        "snapshot_barrier": 30}


def test_a_full_rollback_applies_too_and_the_expired_target_is_never_answered(
        client: httpx.Client, database: Database) -> None:
    _diamond(client)
    _expire(database, "c", 302)
    plan = _plan(client)
    applied = _ok(client.post(f"/rollback-plans/{plan['id']}/apply"))
    assert applied["mode"] == "full" and applied["state"] == "applied"
    for table, snapshot in (("a", 102), ("b", 202), ("d", 402)):
        assert _ok(client.get(f"/version/weak/lake/db/{table}"))["snapshot_id"] == snapshot
    assert_error(client.get("/version/weak/lake/db/c"), 410, "snapshot_expired")
    assert _ok(client.get("/tables/lake/db/c/barriers"))["latest_barrier"] == 20


def test_a_held_barrier_cannot_be_committed_once_invalidated(client: httpx.Client) -> None:
    _diamond(client)
    plan = _plan(client)
    _ok(client.post(f"/rollback-plans/{plan['id']}/apply"))
    _ok(client.post(f"/rollback-plans/{plan['id']}/complete"))
    assert_error(commit(client, "j2", "c", 40), 409, "barrier_rolled_back")
    start = _ok(client.post("/jobs/j2/start"))                # a restarted driver is told too
    assert start["action"] == "abort" and start["barrier"] == 40


def test_a_plan_is_outdated_when_the_topology_changed(client: httpx.Client) -> None:
    _diamond(client)
    plan = _plan(client)
    _ok(client.post("/register/source/j4/lake/db/d"))
    _ok(client.post("/register/sink/j4/lake/db/e"))
    _ok(client.post("/jobs/j4/start"))
    error = assert_error(client.post(f"/rollback-plans/{plan['id']}/apply"), 409,
                   "rollback_plan_outdated")
    assert "lake.db.e" in error["details"]["tables"]


def test_the_writer_of_the_revised_table_restarts_and_its_other_sinks_are_rewritten(
        client: httpx.Client) -> None:
    _diamond(client)
    plan = _ok(client.post("/rollback-plans", json={"table": "lake.db.b", "barrier": 20}), 201)
    assert {t["table"]: t["relation"] for t in plan["tables"]} == {
        "lake.db.b": "revised", "lake.db.d": "downstream"}
    assert sorted(j["job"] for j in plan["jobs"]) == ["j1", "j3"]


@pytest.mark.parametrize("path", ["/rollback-plans/00000000-0000-0000-0000-000000000000",
                                  "/rollback-plans/00000000-0000-0000-0000-000000000000/apply"])
def test_unknown_plan(client: httpx.Client, path: str) -> None:
    method = client.post if path.endswith("apply") else client.get
    assert_error(method(path), 404, "unknown_rollback_plan")


def test_complete_before_apply_and_unknown_table(client: httpx.Client) -> None:
    _diamond(client)
    plan = _plan(client)
    assert_error(client.post(f"/rollback-plans/{plan['id']}/complete"), 409,
           "rollback_plan_not_applied")
    assert_error(client.post("/rollback-plans", json={"table": "lake.db.zz", "barrier": 1}), 404,
           "unknown_table")
