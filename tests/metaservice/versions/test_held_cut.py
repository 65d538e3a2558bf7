"""A strong answer names what holds its cut: a job that joined the pipeline and has not
committed keeps its catching-up sink, and with it the whole component's strong cut, at the
floor (docs/contract.md#catching-up). The answer, the catching-up table's 404 and /delay name that
table, its writer and since when; the hold ends when the job is unregistered.

    r (root) ──A──▶ t1 ──B──▶ t2     (B started after A's first commit, never commits)
"""

from __future__ import annotations

import httpx

from metaservice.clock import ManualClock
from tests.metaservice.protocol.test_examples import commit, plan, post, root, version
from tests.metaservice.test_errors import assert_error

T0 = 1_795_000_000_000  # 2026-11-18T11:06:40Z
F = T0 + 1000  # the cut t1 had when B joined: the floor
B_STARTED = T0 + 60_000  # 2026-11-18T11:07:40Z
NEWEST = T0 + 6000  # A's fifth barrier after F

HOLD = {"table": "lake.db.t2", "latest_barrier": None, "catching_up": True,
        "catch_up_floor": F, "writer_job": "B", "writer_started_at": B_STARTED}


def start_b_beside_a(client: httpx.Client, clock: ManualClock) -> None:
    """r → A → t1 with one barrier, F; then B (t1 → t2) starts and never commits."""
    clock.set(T0)
    plan(client, "A", ["r"], ["t1"])
    root(client, "r", F, 1)
    assert post(client, "/jobs/A/start")["barrier"] == F
    commit(client, "A", "t1", F, 11)
    plan(client, "B", ["t1"], ["t2"])
    clock.set(B_STARTED)
    assert post(client, "/jobs/B/start")["barrier"] == F


def a_completes_five_more(client: httpx.Client, clock: ManualClock) -> None:
    after = F
    for k in range(2, 7):
        barrier = T0 + k * 1000
        clock.set(B_STARTED + k * 1000)
        root(client, "r", barrier, k)
        assert post(client, "/jobs/A/barriers/next", {"after": after})["barrier"] == barrier
        commit(client, "A", "t1", barrier, 10 + k)
        after = barrier
    clock.set(B_STARTED + 300_000)  # five minutes after B started


def test_a_strong_answer_names_the_job_and_table_holding_its_cut(
        client: httpx.Client, clock: ManualClock) -> None:
    start_b_beside_a(client, clock)
    # Pinned at F, but A has nothing newer either: nothing is held, nothing is named.
    assert version(client, "strong", "t1") == {
        "table": "lake.db.t1", "consistency": "strong", "barrier": F, "snapshot_id": 11,
        "snapshot_barrier": F}

    a_completes_five_more(client, clock)
    assert version(client, "strong", "t1") == {
        "table": "lake.db.t1", "consistency": "strong", "barrier": F, "snapshot_id": 11,
        "snapshot_barrier": F, "held_back_by": [HOLD]}
    both = post(client, "/versions", {"consistency": "strong",
                                      "tables": ["lake.db.t1", "lake.db.r"]})
    assert both["versions"] == {
        "lake.db.t1": {"barrier": F, "snapshot_id": 11, "snapshot_barrier": F,
                       "held_back_by": [HOLD]},
        "lake.db.r": {"barrier": F, "snapshot_id": 1, "snapshot_barrier": F,
                      "held_back_by": [HOLD]}}
    leased = post(client, "/versions", {"tables": ["lake.db.t1"], "lease_seconds": 60})
    assert leased["versions"]["lake.db.t1"]["held_back_by"] == [HOLD]
    # Weak answers are not held: they leave catching-up tables out of the request.
    assert version(client, "strong", "t1")["barrier"] == F
    assert "held_back_by" not in version(client, "weak", "t1")

    post(client, "/unregister/B")  # t2 leaves the component: the cut moves on at once
    assert version(client, "strong", "t1") == {
        "table": "lake.db.t1", "consistency": "strong", "barrier": NEWEST, "snapshot_id": 16,
        "snapshot_barrier": NEWEST}


def test_the_new_table_names_its_writer_and_since_when(client: httpx.Client,
                                                        clock: ManualClock) -> None:
    start_b_beside_a(client, clock)
    a_completes_five_more(client, clock)

    for consistency in ("strong", "weak"):
        error = assert_error(client.get(f"/version/{consistency}/lake/db/t2"), 404,
                             "no_version")
        assert error["message"] == (
            "no completed barrier yet for lake.db.t2: lake.db.t2 has no barrier yet; its writer, "
            "job B, has been running since 2026-11-18T11:07:40Z (5 min) without committing a "
            "barrier")
        assert error["details"] == {"tables": ["lake.db.t2"], "holding_back": [HOLD]}


def test_a_catching_up_table_names_its_writer_and_since_when(client: httpx.Client,
                                                             clock: ManualClock) -> None:
    """t2 was a root table with one barrier older than the floor when B took it over."""
    clock.set(T0)
    root(client, "t2", T0 + 500, 21)
    start_b_beside_a(client, clock)
    a_completes_five_more(client, clock)

    error = assert_error(client.get("/version/strong/lake/db/t2"), 404, "catching_up")
    assert error["message"] == (
        "lake.db.t2 joined a pipeline behind its strong cut and is catching up: lake.db.t2 is "
        f"catching up (latest barrier {T0 + 500}); its writer, job B, has been running since "
        "2026-11-18T11:07:40Z (5 min)")
    hold = HOLD | {"latest_barrier": T0 + 500}
    assert error["details"] == {"tables": ["lake.db.t2"], "holding_back": [hold]}
    assert version(client, "strong", "t1")["held_back_by"] == [hold]
