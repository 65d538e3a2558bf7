"""Input that would corrupt state is refused before anything is recorded (docs/contract.md#barriers,
docs/contract.md#expired-snapshots-stay-gone, docs/contract.md#start), on both backends: barriers
beyond the future bound, approved-for-expiration snapshots reported as a table's latest, and a
waiting start answers ``"barrier": null``."""

from __future__ import annotations

import httpx
import pytest
from pydantic import ValidationError

from metaservice.clock import ManualClock
from metaservice.schemas import INT64_MAX
from metaservice.settings import Settings
from tests.metaservice.barriers.test_barriers import commit, root
from tests.metaservice.jobs.test_jobs import plan
from tests.metaservice.test_errors import assert_error

DAY_MS = 86_400_000


def barriers_of(client: httpx.Client, table: str) -> list[tuple[int, int]]:
    history = client.get(f"/tables/{table.replace('.', '/')}/barriers").json()["barriers"]
    return [(b["barrier"], b["snapshot_id"]) for b in history]


def approve_unknown(client: httpx.Client, table: str, snapshot: int) -> None:
    answer = client.post(f"/tables/{table.replace('.', '/')}/expirations",
                         json={"snapshot_ids": [snapshot], "approve_unknown": True}).json()
    assert answer["approved"] == [snapshot], answer


# -- barriers beyond the future bound ----------------------------------------------------------


def test_root_report_far_in_the_future_is_refused_and_the_table_keeps_advancing(
        client: httpx.Client, clock: ManualClock) -> None:
    err = assert_error(root(client, "lake.db.r", 1, INT64_MAX), 422, "barrier_in_future")
    assert err["details"]["barrier"] == INT64_MAX
    assert err["details"]["max_barrier"] == clock.now_ms() + DAY_MS
    assert_error(client.get("/tables/lake/db/r/barriers"), 404, "unknown_table")  # not created
    # Nothing was recorded: an assigned barrier still comes from the clock.
    assert root(client, "lake.db.r", 2).json()["barrier"] == clock.now_ms()


def test_the_bound_is_inclusive_and_an_assigned_barrier_after_it_fits(
        client: httpx.Client, clock: ManualClock) -> None:
    bound = clock.now_ms() + DAY_MS
    assert_error(root(client, "lake.db.r", 1, bound + 1), 422, "barrier_in_future")
    assert root(client, "lake.db.r", 1, bound).status_code == 200
    assert root(client, "lake.db.r", 2).json()["barrier"] == bound + 1  # latest + 1
    clock.advance(DAY_MS)  # time catches up: what was too far ahead is accepted now
    assert root(client, "lake.db.r", 3, bound + 2).status_code == 200


def test_commit_far_in_the_future_is_refused(client: httpx.Client, clock: ManualClock) -> None:
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    root(client, "lake.db.a", 1, 10)
    assert client.post("/jobs/etl/start").json()["barrier"] == 10
    assert_error(commit(client, "etl", "lake.db.b", INT64_MAX, 5), 422, "barrier_in_future")
    assert commit(client, "etl", "lake.db.b", 10, 5).status_code == 200


def test_commit_of_a_job_without_sources_far_in_the_future_is_refused(
        client: httpx.Client, clock: ManualClock) -> None:
    plan(client, "ingest", [], ["lake.db.raw"])
    assert client.post("/jobs/ingest/start").json()["action"] == "none"
    assert_error(commit(client, "ingest", "lake.db.raw", INT64_MAX, 1), 422, "barrier_in_future")
    # Nothing was recorded: the next commit without a barrier is assigned one from the clock.
    done = commit(client, "ingest", "lake.db.raw", None, 2)
    assert done.status_code == 200 and done.json()["barrier"] == clock.now_ms()
    assert barriers_of(client, "lake.db.raw") == [(clock.now_ms(), 2)]


def test_start_from_a_barrier_far_in_the_future_is_refused(client: httpx.Client) -> None:
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    root(client, "lake.db.a", 1, 10)
    assert_error(client.post("/jobs/etl/start", json={"from": INT64_MAX}), 422,
                 "barrier_in_future")
    assert client.get("/jobs/etl").json()["state"] == "planned"  # the start was rolled back
    assert client.post("/jobs/etl/start", json={"from": 10}).json()["barrier"] == 10


def test_the_future_bound_setting_is_capped_far_below_int64() -> None:
    assert Settings(max_barrier_ahead_seconds=60).max_barrier_ahead_seconds == 60
    with pytest.raises(ValidationError):
        Settings(max_barrier_ahead_seconds=INT64_MAX / 1000)


# -- snapshots approved for expiration ----------------------------------------------------------


def test_root_report_of_a_snapshot_approved_for_expiration_is_refused(
        client: httpx.Client) -> None:
    root(client, "lake.db.t", 1, 10)
    approve_unknown(client, "lake.db.t", 777)
    err = assert_error(root(client, "lake.db.t", 777, 20), 410, "snapshot_expired")
    assert err["details"] == {"table": "lake.db.t", "snapshot_id": 777}
    assert barriers_of(client, "lake.db.t") == [(10, 1)]
    assert root(client, "lake.db.t", 2, 20).status_code == 200


def test_commit_of_a_snapshot_approved_for_expiration_is_refused(client: httpx.Client) -> None:
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    root(client, "lake.db.a", 1, 10)
    client.post("/jobs/etl/start")
    approve_unknown(client, "lake.db.b", 900)
    assert_error(commit(client, "etl", "lake.db.b", 10, 900), 410, "snapshot_expired")
    assert barriers_of(client, "lake.db.b") == []
    assert commit(client, "etl", "lake.db.b", 10, 901).status_code == 200


def test_commit_of_a_job_without_sources_with_an_approved_snapshot_is_refused(
        client: httpx.Client) -> None:
    plan(client, "ingest", [], ["lake.db.raw"])
    client.post("/jobs/ingest/start")
    approve_unknown(client, "lake.db.raw", 55)
    assert_error(commit(client, "ingest", "lake.db.raw", None, 55), 410, "snapshot_expired")
    assert barriers_of(client, "lake.db.raw") == []


def test_an_exact_repeat_of_an_approved_snapshot_still_answers_as_the_first_did(
        client: httpx.Client) -> None:
    root(client, "lake.db.t", 1, 10)
    root(client, "lake.db.t", 2, 20)
    answer = client.post("/tables/lake/db/t/expirations", json={"snapshot_ids": [1]}).json()
    assert answer["approved"] == [1]
    assert root(client, "lake.db.t", 1, 10).json() == {"table": "lake.db.t", "barrier": 10,
                                                       "snapshot_id": 1}
    assert_error(root(client, "lake.db.t", 1, 30), 410, "snapshot_expired")


# -- a waiting start says so ------------------------------------------------------------------


def test_a_waiting_start_answers_barrier_and_previous_null(client: httpx.Client) -> None:
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    answer = client.post("/jobs/etl/start").json()
    assert answer["action"] == "wait"
    assert answer["barrier"] is None and answer["previous"] is None
    assert answer["retry_after_ms"] > 0 and "snapshots" not in answer


def test_a_full_first_step_answers_no_previous(client: httpx.Client) -> None:
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    root(client, "lake.db.a", 1, 10)
    answer = client.post("/jobs/etl/start").json()
    assert answer["action"] == "process" and answer["barrier"] == 10
    assert answer["snapshots"] == {"lake.db.a": 1}
    assert "previous" in answer and not answer["previous"]  # a full step reads full snapshots
    # next keeps its own answer: a waiting next has no barrier key.
    commit(client, "etl", "lake.db.b", 10, 5)
    assert client.post("/jobs/etl/barriers/next", json={"after": 10}).json() == {
        "action": "wait", "retry_after_ms": 500}


def test_a_job_without_sources_starts_with_no_position(client: httpx.Client) -> None:
    plan(client, "ingest", [], ["lake.db.raw"])
    answer = client.post("/jobs/ingest/start").json()
    assert answer["action"] == "none"
    assert answer["barrier"] is None and "previous" in answer and not answer["previous"]
