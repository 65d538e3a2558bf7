"""Registration, start and stop of jobs (docs/contract.md#jobs,
docs/contract.md#one-writer-per-table, docs/contract.md#no-cycles,
docs/contract.md#the-barrier-protocol) on both backends."""

from __future__ import annotations

import threading

import httpx
import pytest

from metaservice.clock import ManualClock
from metaservice.db.session import Database
from metaservice.repositories import jobs as jobs_repo


def register(client: httpx.Client, job: str, role: str, table: str) -> httpx.Response:
    return client.post(f"/register/{role}/{job}/{table.replace('.', '/')}")


def plan(client: httpx.Client, job: str, sources: list[str], sinks: list[str]) -> None:
    for t in sources:
        assert register(client, job, "source", t).status_code == 200
    for t in sinks:
        assert register(client, job, "sink", t).status_code == 200


def error(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]


def test_registration_is_idempotent(client: httpx.Client) -> None:
    first = register(client, "etl", "source", "lake.db.orders")
    again = register(client, "etl", "source", "lake.db.orders")
    assert first.status_code == again.status_code == 200
    assert again.json()["sources"] == ["lake.db.orders"]
    assert again.json()["state"] == "planned"
    register(client, "etl", "sink", "lake.db.out")
    job = client.get("/jobs/etl").json()
    assert job["sources"] == ["lake.db.orders"] and job["sinks"] == ["lake.db.out"]
    assert job["state"] == "planned" and job["run"] == 0


@pytest.mark.parametrize("path", [
    "/register/source/etl/lake/db/..",
    "/register/source/etl/lake/db/a%00b",
    "/register/source/etl/lake/db%1F%1Fx/t",  # an empty level
    "/register/source/etl/lake/db/a%09b",
    "/register/source/etl/lake/db/" + "x" * 129,
    "/register/sink/bad%20job/lake/db/t",
    "/register/sink/" + "j" * 201 + "/lake/db/t",
    "/jobs/bad%2Fjob",
])
def test_bad_names_are_refused_before_storage(client: httpx.Client, path: str) -> None:
    response = client.post(path) if path.startswith("/register") else client.get(path)
    assert response.status_code in (404, 422), response.text
    if response.status_code == 422:
        assert error(response)["code"] == "invalid_request"
    assert client.get("/jobs").json()["jobs"] == []


def test_names_are_case_sensitive(client: httpx.Client) -> None:
    plan(client, "etl", ["lake.db.Orders"], ["lake.db.orders"])
    assert client.post("/jobs/etl/start").status_code == 200


def test_unknown_job_is_404(client: httpx.Client) -> None:
    for response in (client.get("/jobs/nope"), client.post("/jobs/nope/start"),
                     client.post("/unregister/nope")):
        assert response.status_code == 404
        assert error(response)["code"] == "unknown_job"


def test_unregister_is_idempotent_and_keeps_history(client: httpx.Client) -> None:
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    client.post("/jobs/etl/start")
    first = client.post("/unregister/etl")
    second = client.post("/unregister/etl")
    assert first.status_code == second.status_code == 200
    assert second.json()["state"] == "terminated"
    assert client.get("/jobs/etl").json()["state"] == "terminated"
    assert client.get("/lineage").json()["jobs"] == []


def test_second_writer_of_a_table_is_refused_at_start(client: httpx.Client) -> None:
    plan(client, "one", ["lake.db.src"], ["lake.db.out"])
    plan(client, "two", ["lake.db.other"], ["lake.db.out"])  # planning the same sink is fine
    assert client.post("/jobs/one/start").status_code == 200
    refused = client.post("/jobs/two/start")
    assert refused.status_code == 409
    assert error(refused)["code"] == "table_has_writer"
    assert error(refused)["details"] == {"table": "lake.db.out", "writer": "one"}
    client.post("/unregister/one")
    assert client.post("/jobs/two/start").status_code == 200


def test_a_job_reading_and_writing_one_table_is_a_cycle(client: httpx.Client) -> None:
    register(client, "selfish", "source", "lake.db.t")
    refused = register(client, "selfish", "sink", "lake.db.t")
    assert refused.status_code == 409
    assert error(refused)["details"]["path"] == ["lake.db.t", "selfish", "lake.db.t"]


def test_cycle_through_a_deep_chain_is_refused_with_its_path(client: httpx.Client) -> None:
    depth = 30
    for i in range(depth):
        plan(client, f"j{i}", [f"lake.db.t{i}"], [f"lake.db.t{i + 1}"])
        assert client.post(f"/jobs/j{i}/start").status_code == 200
    register(client, "back", "source", f"lake.db.t{depth}")
    refused = register(client, "back", "sink", "lake.db.t0")
    assert refused.status_code == 409
    path = error(refused)["details"]["path"]
    assert path[0] == path[-1] and "back" in path and len(path) == 2 * (depth + 1) + 1


def test_cycle_is_checked_again_at_start(client: httpx.Client) -> None:
    # Both planned while neither runs: no cycle yet; the second start would close it.
    plan(client, "ab", ["lake.db.a"], ["lake.db.b"])
    plan(client, "ba", ["lake.db.b"], ["lake.db.a"])
    assert client.post("/jobs/ab/start").status_code == 200
    refused = client.post("/jobs/ba/start")
    assert refused.status_code == 409 and error(refused)["code"] == "cycle"
    assert client.get("/jobs/ba").json()["state"] == "planned"


def test_diamond_is_accepted_and_closing_it_is_a_cycle(client: httpx.Client) -> None:
    plan(client, "left", ["lake.db.a"], ["lake.db.b"])
    plan(client, "right", ["lake.db.a"], ["lake.db.c"])
    plan(client, "join", ["lake.db.b", "lake.db.c"], ["lake.db.d"])
    for j in ("left", "right", "join"):
        assert client.post(f"/jobs/{j}/start").status_code == 200
    register(client, "loop", "source", "lake.db.d")
    refused = register(client, "loop", "sink", "lake.db.a")
    assert refused.status_code == 409
    assert set(error(refused)["details"]["path"]) >= {"lake.db.a", "lake.db.d", "loop", "join"}


def test_registering_a_new_edge_on_a_running_job_is_refused(client: httpx.Client) -> None:
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    client.post("/jobs/etl/start")
    assert register(client, "etl", "source", "lake.db.a").status_code == 200  # idempotent
    refused = register(client, "etl", "source", "lake.db.z")
    assert refused.status_code == 409 and error(refused)["code"] == "job_not_planned"


def test_planned_jobs_are_forgotten_after_the_ttl(client: httpx.Client, clock: ManualClock) -> None:
    plan(client, "stale", ["lake.db.a"], ["lake.db.b"])
    plan(client, "started", ["lake.db.c"], ["lake.db.d"])
    client.post("/jobs/started/start")
    clock.advance(3600 * 1000 + 1)
    assert client.get("/jobs/stale").status_code == 404
    assert [j["job"] for j in client.get("/jobs").json()["jobs"]] == ["started"]
    assert client.post("/jobs/stale/start").status_code == 404
    # Registering again plans it afresh.
    assert register(client, "stale", "source", "lake.db.x").json()["sources"] == ["lake.db.x"]


def test_list_jobs_filters_by_state(client: httpx.Client) -> None:
    plan(client, "p", ["lake.db.a"], ["lake.db.b"])
    plan(client, "r", ["lake.db.c"], ["lake.db.d"])
    client.post("/jobs/r/start")
    assert [j["job"] for j in client.get("/jobs?state=running").json()["jobs"]] == ["r"]
    assert [j["job"] for j in client.get("/jobs?state=planned").json()["jobs"]] == ["p"]
    assert client.get("/jobs?state=bogus").status_code == 422


def test_two_jobs_racing_to_start_with_the_same_sink_exactly_one_wins(
        client: httpx.Client) -> None:
    base = str(client.base_url)
    for round_ in range(10):
        sink = f"lake.db.out{round_}"
        jobs = [f"r{round_}-{i}" for i in range(4)]
        for j in jobs:
            plan(client, j, [f"lake.db.in{round_}-{j}"], [sink])
        barrier = threading.Barrier(len(jobs))
        results: dict[str, int] = {}

        def start(j: str, barrier: threading.Barrier = barrier,
                  results: dict[str, int] = results) -> None:
            with httpx.Client(base_url=base, timeout=30) as own:
                barrier.wait()
                results[j] = own.post(f"/jobs/{j}/start").status_code

        threads = [threading.Thread(target=start, args=(j,)) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results.values()) == [200, 409, 409, 409], results
        running = [j["job"] for j in client.get("/jobs?state=running").json()["jobs"]
                   if sink in j["sinks"]]
        assert len(running) == 1


def test_registering_an_edge_a_running_job_has_is_a_read(client: httpx.Client,
                                                         database: Database) -> None:
    """A streaming sink registers its edge at every micro-batch: for a running job that already
    has it, the answer must not wait for the write lock another commit holds."""
    plan(client, "reader", ["lake.db.in"], ["lake.db.out"])
    assert client.post("/jobs/reader/start").status_code == 200
    with database.transaction(write=True) as session:
        # SQLite: this write transaction holds the database's write lock; PostgreSQL: the job's
        # row lock, which the write path of a registration takes first.
        assert jobs_repo.get_job(session, "reader", for_update=True) is not None
        again = client.post("/register/sink/reader/lake/db/out", timeout=5)
        assert again.status_code == 200, again.text
        assert again.json()["state"] == "running"
        assert again.json()["sinks"] == ["lake.db.out"]
    # A new edge still goes through the write path, and is refused on a running job.
    assert error(register(client, "reader", "sink", "lake.db.other"))["code"] == \
        "job_not_planned"
