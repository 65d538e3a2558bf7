"""Kept examples: the two worked examples of docs/contract.md#worked-examples through the real HTTP
API, exactly as written, and cases the protocol model (``machine.py``) found or that pin a rule of
docs/contract.md#the-barrier-protocol, as plain tests."""

from __future__ import annotations

from typing import Any

import httpx


def post(client: httpx.Client, url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = client.post(url, json=body or {})
    assert response.status_code == 200, (url, body, response.text)
    return response.json()


def plan(client: httpx.Client, job: str, sources: list[str], sinks: list[str]) -> None:
    for role, tables in (("source", sources), ("sink", sinks)):
        for t in tables:
            post(client, f"/register/{role}/{job}/lake/db/{t}")


def root(client: httpx.Client, table: str, barrier: int, snapshot: int) -> None:
    assert post(client, f"/tables/lake/db/{table}/barriers",
                {"snapshot_id": snapshot, "barrier": barrier}) == {
        "table": f"lake.db.{table}", "barrier": barrier, "snapshot_id": snapshot}


def commit(client: httpx.Client, job: str, table: str, barrier: int, snapshot: int) -> None:
    assert post(client, f"/commit/{job}/lake/db/{table}",
                {"barrier": barrier, "snapshot_id": snapshot}) == {
        "table": f"lake.db.{table}", "barrier": barrier, "snapshot_id": snapshot}


def version(client: httpx.Client, consistency: str, table: str) -> dict[str, Any]:
    response = client.get(f"/version/{consistency}/lake/db/{table}")
    assert response.status_code == 200, response.text
    return response.json()


def one(consistency: str, table: str, barrier: int, snapshot: int,
        snapshot_barrier: int) -> dict[str, Any]:
    return {"table": f"lake.db.{table}", "consistency": consistency, "barrier": barrier,
            "snapshot_id": snapshot, "snapshot_barrier": snapshot_barrier}


def versions(client: httpx.Client, tables: list[str], **body: Any) -> httpx.Response:
    return client.post("/versions", json={"tables": [f"lake.db.{t}" for t in tables], **body})


def cut(barrier: int, **snapshots: tuple[int, int]) -> dict[str, dict[str, int]]:
    """``{"lake.db.<t>": {"barrier": barrier, "snapshot_id": s, "snapshot_barrier": b}}``."""
    return {f"lake.db.{t}": {"barrier": barrier, "snapshot_id": s, "snapshot_barrier": b}
            for t, (s, b) in snapshots.items()}


# -- docs/contract.md#worked-examples, the chain ---------------------------------------------------


def test_spec_worked_example_chain(client: httpx.Client) -> None:
    """table1 → job A → table2, and an unrelated table3. Completed barriers: table1 {10, 20, 30}
    with snapshots 101, 102, 103; table2 {10, 20} with snapshots 201, 202; table3 {25} with
    snapshot 301."""
    plan(client, "A", ["table1"], ["table2"])
    root(client, "table1", 10, 101)
    start = post(client, "/jobs/A/start", {"from": "latest"})
    assert (start["action"], start["barrier"], start["snapshots"], start["previous"]) == (
        "process", 10, {"lake.db.table1": 101}, None)
    commit(client, "A", "table2", 10, 201)
    root(client, "table1", 20, 102)
    step = post(client, "/jobs/A/barriers/next", {"after": 10})
    assert step == {"action": "process", "barrier": 20, "snapshots": {"lake.db.table1": 102},
                    "previous": {"lake.db.table1": 101}}
    commit(client, "A", "table2", 20, 202)
    root(client, "table1", 30, 103)
    root(client, "table3", 25, 301)

    # strong for any of them: table1 → 102 (barrier 20), table2 → 202 (20), table3 → 301 (25).
    assert version(client, "strong", "table1") == one("strong", "table1", 20, 102, 20)
    assert version(client, "strong", "table2") == one("strong", "table2", 20, 202, 20)
    assert version(client, "strong", "table3") == one("strong", "table3", 25, 301, 25)
    strong = versions(client, ["table1", "table2", "table3"], consistency="strong")
    assert strong.json() == {"consistency": "strong", "versions": {
        **cut(20, table1=(102, 20), table2=(202, 20)), **cut(25, table3=(301, 25))}}
    # weak for {table1} alone: 103 (30); for {table1, table2}: 102 and 202 (20); {table3}: 301.
    assert version(client, "weak", "table1") == one("weak", "table1", 30, 103, 30)
    assert versions(client, ["table1"], consistency="weak").json()["versions"] == cut(
        30, table1=(103, 30))
    assert versions(client, ["table1", "table2"], consistency="weak").json() == {
        "consistency": "weak", "versions": cut(20, table1=(102, 20), table2=(202, 20))}
    assert version(client, "weak", "table3") == one("weak", "table3", 25, 301, 25)
    # barrier 30 for {table1, table2}: 409 barrier_not_complete naming table2.
    refused = versions(client, ["table1", "table2"], barrier=30)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "barrier_not_complete"
    assert refused.json()["error"]["details"]["tables"] == ["lake.db.table2"]
    # barrier 20 is a reproducible read of both.
    assert versions(client, ["table1", "table2"], barrier=20).json() == {
        "consistency": "barrier", "versions": cut(20, table1=(102, 20), table2=(202, 20))}


# -- docs/contract.md#worked-examples, fan-out -----------------------------------------------------


def test_spec_worked_example_fan_out(client: httpx.Client) -> None:
    """r → job A → t1 and r → job B → t2. r completed {10, 20, 30} (snapshots 101, 102, 103);
    A completed 10, then processed 20 and 30 in one step and completed only 30 (t1: 111 at 10,
    113 at 30); B completed 10 and 20 (t2: 121, 122). t1 is exact at 10 and 30 only, t2 at 10
    and 20, r everywhere from 10.

    ``next`` aligns siblings (docs/contract.md#alignment), so it never hands A 30 once B completed
    20: A is taken to 30 the way a streaming sink replays a batch, by starting the running job again
    at an explicit barrier."""
    plan(client, "A", ["r"], ["t1"])
    plan(client, "B", ["r"], ["t2"])
    root(client, "r", 10, 101)
    assert post(client, "/jobs/A/start", {"from": "latest"})["barrier"] == 10
    commit(client, "A", "t1", 10, 111)
    assert post(client, "/jobs/B/start", {"from": "latest"})["barrier"] == 10
    commit(client, "B", "t2", 10, 121)
    root(client, "r", 20, 102)
    step = post(client, "/jobs/B/barriers/next", {"after": 10})
    assert (step["barrier"], step["snapshots"], step["previous"]) == (
        20, {"lake.db.r": 102}, {"lake.db.r": 101})
    commit(client, "B", "t2", 20, 122)
    root(client, "r", 30, 103)
    step = post(client, "/jobs/A/start", {"from": 30})
    assert (step["action"], step["barrier"], step["snapshots"]) == (
        "process", 30, {"lake.db.r": 103})
    commit(client, "A", "t1", 30, 113)

    # strong for any of r, t1, t2: barrier 10 (101, 111, 121).
    assert version(client, "strong", "r") == one("strong", "r", 10, 101, 10)
    assert version(client, "strong", "t1") == one("strong", "t1", 10, 111, 10)
    assert version(client, "strong", "t2") == one("strong", "t2", 10, 121, 10)
    assert versions(client, ["r", "t1", "t2"], consistency="strong").json()["versions"] == cut(
        10, r=(101, 10), t1=(111, 10), t2=(121, 10))
    # weak for {t1, r}: 30 (113, 103); for {t2, r}: 20 (122, 102); for {t1, t2}: 10.
    assert versions(client, ["t1", "r"], consistency="weak").json()["versions"] == cut(
        30, t1=(113, 30), r=(103, 30))
    assert versions(client, ["t2", "r"], consistency="weak").json()["versions"] == cut(
        20, t2=(122, 20), r=(102, 20))
    assert versions(client, ["t1", "t2"], consistency="weak").json()["versions"] == cut(
        10, t1=(111, 10), t2=(121, 10))
    # barrier 20 for {t1, t2}: 409 barrier_not_exact naming t1 (exact at 10 and 30).
    refused = versions(client, ["t1", "t2"], barrier=20)
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "barrier_not_exact"
    assert error["details"]["tables"] == ["lake.db.t1"]
    assert error["details"]["nearest"] == {"lake.db.t1": {"below": 10, "above": 30}}
    assert error["details"]["barrier"] == 20
    # Where both are exact the explicit read is served.
    assert versions(client, ["t1", "t2"], barrier=10).json()["versions"] == cut(
        10, t1=(111, 10), t2=(121, 10))


def test_a_join_of_siblings_is_handed_only_barriers_both_are_exact_at(
        client: httpx.Client) -> None:
    """The fan-out example with a join J of t1 and t2 downstream: once A completed 30 and B 20,
    J (at 10) must not be handed 20 with t1's snapshot of 10 — t1 is not exact at 20. When B
    is taken to 30 as well, J gets 30 with both snapshots of 30."""
    plan(client, "A", ["r"], ["t1"])
    plan(client, "B", ["r"], ["t2"])
    plan(client, "J", ["t1", "t2"], ["y"])
    root(client, "r", 10, 101)
    for job, sink, snapshot in (("A", "t1", 111), ("B", "t2", 121)):
        assert post(client, f"/jobs/{job}/start", {"from": "latest"})["barrier"] == 10
        commit(client, job, sink, 10, snapshot)
    start = post(client, "/jobs/J/start", {"from": "latest"})
    assert (start["barrier"], start["snapshots"]) == (10, {"lake.db.t1": 111, "lake.db.t2": 121})
    commit(client, "J", "y", 10, 131)
    root(client, "r", 20, 102)
    assert post(client, "/jobs/B/barriers/next", {"after": 10})["barrier"] == 20
    commit(client, "B", "t2", 20, 122)
    root(client, "r", 30, 103)
    assert post(client, "/jobs/A/start", {"from": 30})["barrier"] == 30
    commit(client, "A", "t1", 30, 113)

    step = post(client, "/jobs/J/barriers/next", {"after": 10})
    assert step["action"] == "wait", step
    step = post(client, "/jobs/B/barriers/next", {"after": 20})
    assert (step["barrier"], step["previous"]) == (30, {"lake.db.r": 102})
    commit(client, "B", "t2", 30, 123)
    step = post(client, "/jobs/J/barriers/next", {"after": 10})
    assert step == {"action": "process", "barrier": 30,
                    "snapshots": {"lake.db.t1": 113, "lake.db.t2": 123},
                    "previous": {"lake.db.t1": 111, "lake.db.t2": 121}}


# -- docs/contract.md#start, docs/contract.md#alignment: starts and siblings -----------------------


def test_a_sibling_behind_is_aligned_to_the_barrier_the_leader_took(
        client: httpx.Client) -> None:
    """The issue's report: A asks when r completed 20 and 30 and is handed 30; B, behind, is
    handed 30 as well (not 20, which A will never complete), so t1 and t2 share 30 and the
    strong cut of {r, t1, t2} reaches it."""
    plan(client, "A", ["r"], ["t1"])
    plan(client, "B", ["r"], ["t2"])
    root(client, "r", 10, 101)
    for job, sink, snapshot in (("A", "t1", 111), ("B", "t2", 121)):
        assert post(client, f"/jobs/{job}/start")["barrier"] == 10
        commit(client, job, sink, 10, snapshot)
    root(client, "r", 20, 102)
    root(client, "r", 30, 103)
    assert post(client, "/jobs/A/barriers/next", {"after": 10})["barrier"] == 30
    commit(client, "A", "t1", 30, 113)
    step = post(client, "/jobs/B/barriers/next", {"after": 10})
    assert (step["barrier"], step["snapshots"], step["previous"]) == (
        30, {"lake.db.r": 103}, {"lake.db.r": 101})
    commit(client, "B", "t2", 30, 123)
    assert versions(client, ["r", "t1", "t2"], consistency="strong").json()["versions"] == cut(
        30, r=(103, 30), t1=(113, 30), t2=(123, 30))


def test_a_job_started_again_resumes_after_what_its_sink_holds(client: httpx.Client) -> None:
    """Unregister, register again, start with the default (resume): no barrier at or below the
    sink's latest, and the first step is incremental."""
    plan(client, "etl", ["a"], ["b"])
    root(client, "a", 10, 1)
    assert post(client, "/jobs/etl/start")["barrier"] == 10
    commit(client, "etl", "b", 10, 100)
    post(client, "/unregister/etl")
    plan(client, "etl", ["a"], ["b"])
    again = post(client, "/jobs/etl/start")
    assert (again["action"], again["barrier"]) == ("wait", None)
    root(client, "a", 20, 2)
    step = post(client, "/jobs/etl/barriers/next")
    assert (step["barrier"], step["previous"]) == (20, {"lake.db.a": 1})


def test_a_new_writer_of_a_table_is_never_pinned_at_or_below_its_latest(
        client: httpx.Client) -> None:
    """A second job takes over a sink another job wrote up to 20, starting from ``earliest``:
    it is handed nothing it could not commit, and continues after 20."""
    plan(client, "old", ["a"], ["b"])
    root(client, "a", 10, 1)
    assert post(client, "/jobs/old/start")["barrier"] == 10
    commit(client, "old", "b", 10, 100)
    root(client, "a", 20, 2)
    assert post(client, "/jobs/old/barriers/next")["barrier"] == 20
    commit(client, "old", "b", 20, 200)
    post(client, "/unregister/old")
    plan(client, "new", ["a"], ["b"])
    first = post(client, "/jobs/new/start", {"from": "earliest"})
    assert first["action"] == "wait" or first["barrier"] > 20, first
    root(client, "a", 30, 3)
    step = first if first["action"] == "process" else post(client, "/jobs/new/barriers/next")
    assert step["barrier"] == 30, step
    commit(client, "new", "b", 30, 300)


# -- kept from the chain-only model ------------------------------------------------------------


def test_starting_a_running_job_again_goes_on_where_the_run_is(client: httpx.Client) -> None:
    """A driver restarted mid-run calls start: it gets the next barrier with ``previous`` (an
    incremental read), never the full start position again nor a barrier already committed."""
    plan(client, "etl", ["a"], ["b"])
    root(client, "a", 10, 1)
    post(client, "/jobs/etl/start")
    commit(client, "etl", "b", 10, 100)
    assert post(client, "/jobs/etl/start")["action"] == "wait"
    root(client, "a", 20, 2)
    again = post(client, "/jobs/etl/start", {"from": "latest"})
    assert (again["action"], again["barrier"]) == ("process", 20)
    assert again["previous"] == {"lake.db.a": 1}


def test_starting_a_running_job_at_an_explicit_barrier_pins_that_barrier(
        client: httpx.Client) -> None:
    """How a streaming sink replays a micro-batch whose barrier the service no longer pins."""
    plan(client, "etl", ["a"], ["b"])
    root(client, "a", 10, 1)
    post(client, "/jobs/etl/start")
    commit(client, "etl", "b", 10, 100)
    root(client, "a", 20, 2)
    root(client, "a", 30, 3)
    assert post(client, "/jobs/etl/barriers/next")["barrier"] == 30
    post(client, "/jobs/etl/barriers/30/abort", {"reason": "replaying 20"})
    again = post(client, "/jobs/etl/start", {"from": 20})
    assert (again["action"], again["barrier"], again["snapshots"]) == ("process", 20,
                                                                       {"lake.db.a": 2})
    commit(client, "etl", "b", 20, 200)
    assert client.get("/jobs/etl").json()["last_committed_barrier"] == 20


# -- strong cuts and catching up (docs/contract.md#catching-up) ------------------------------------


def test_a_table_rejoining_never_moves_the_strong_cut_back(client: httpx.Client) -> None:
    """t joins r's component catching up (r completed 1000 before its job started): the
    component is held at that floor while r moves on to 1100, t rejoins once it is exact at a
    barrier >= 1000, and r's strong version never goes back (docs/decisions.md, "Strong cuts and
    catching up"). The race of the rejoining commit with a root report on two server processes
    is ``test_strong_cut_race.py``."""
    plan(client, "J", ["r"], ["t"])
    root(client, "r", 1000, 1)
    assert post(client, "/jobs/J/start", {"from": "latest"})["barrier"] == 1000
    root(client, "r", 1100, 2)
    assert version(client, "strong", "r")["barrier"] == 1000  # held at the floor
    caught = client.get("/version/strong/lake/db/t")
    assert caught.status_code == 404 and caught.json()["error"]["code"] == "no_version"
    commit(client, "J", "t", 1000, 10)  # exact at the floor: t rejoins, the cut stays
    assert version(client, "strong", "r")["barrier"] == 1000
    assert version(client, "strong", "t")["barrier"] == 1000
    step = post(client, "/jobs/J/barriers/next", {"after": 1000})
    assert step["barrier"] == 1100
    commit(client, "J", "t", 1100, 11)
    assert version(client, "strong", "r")["barrier"] == 1100
    assert version(client, "strong", "t")["barrier"] == 1100
