"""SPEC §4's worked example, through the real HTTP API."""

from __future__ import annotations

import httpx


def _pipeline(client: httpx.Client) -> None:
    """table1 -> job A -> table2, and an unrelated table3, run the way a pipeline runs: the job
    starts, then follows its source barrier by barrier."""

    def root(table: str, barrier: int, snapshot: int) -> None:
        r = client.post(f"/tables/lake/db/{table}/barriers",
                        json={"snapshot_id": snapshot, "barrier": barrier})
        assert r.status_code == 200, r.text

    def commit(barrier: int, snapshot: int) -> None:
        r = client.post("/commit/A/lake/db/table2",
                        json={"barrier": barrier, "snapshot_id": snapshot})
        assert r.json() == {"table": "lake.db.table2", "barrier": barrier,
                            "snapshot_id": snapshot}, r.text

    assert client.post("/register/source/A/lake/db/table1").status_code == 200
    assert client.post("/register/sink/A/lake/db/table2").status_code == 200
    root("table1", 10, 101)
    start = client.post("/jobs/A/start", json={"from": "latest"}).json()
    assert start["action"] == "process" and start["barrier"] == 10
    assert start["snapshots"] == {"lake.db.table1": 101}
    commit(10, 201)
    assert client.post("/jobs/A/barriers/next", json={"after": 10}).json()["action"] == "wait"
    root("table1", 20, 102)
    step = client.post("/jobs/A/barriers/next", json={"after": 10}).json()
    assert step == {"action": "process", "barrier": 20, "snapshots": {"lake.db.table1": 102},
                    "previous": {"lake.db.table1": 101}}
    commit(20, 202)
    root("table1", 30, 103)
    root("table3", 25, 301)


def test_strong_weak_and_explicit_barrier(client: httpx.Client) -> None:
    _pipeline(client)

    def version(consistency: str, table: str) -> tuple[int, int]:
        body = client.get(f"/version/{consistency}/lake/db/{table}").json()
        return body["barrier"], body["snapshot_id"]

    assert version("strong", "table1") == (20, 102)
    assert version("strong", "table2") == (20, 202)
    assert version("strong", "table3") == (25, 301)
    assert version("weak", "table1") == (30, 103)
    assert version("weak", "table3") == (25, 301)

    weak = client.post("/versions", json={"consistency": "weak",
                                          "tables": ["lake.db.table1", "lake.db.table2"]}).json()
    assert weak == {"consistency": "weak", "versions": {
        "lake.db.table1": {"barrier": 20, "snapshot_id": 102, "snapshot_barrier": 20},
        "lake.db.table2": {"barrier": 20, "snapshot_id": 202, "snapshot_barrier": 20}}}

    r = client.post("/versions", json={"tables": ["lake.db.table1", "lake.db.table2"],
                                       "barrier": 30})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "barrier_not_complete"
    assert r.json()["error"]["details"]["tables"] == ["lake.db.table2"]

    ok = client.post("/versions", json={"tables": ["lake.db.table1", "lake.db.table2"],
                                        "barrier": 20}).json()
    assert ok["consistency"] == "barrier"
    assert ok["versions"]["lake.db.table1"] == {"barrier": 20, "snapshot_id": 102,
                                                "snapshot_barrier": 20}


def _fan_out(client: httpx.Client) -> None:
    """SPEC §4's fan-out example: r -> A -> t1 and r -> B -> t2. A completes 10, then processes
    20 and 30 in one step (a driver restarted with an explicit barrier, the one way to skip a
    barrier a sibling completed) and completes only 30; B completes 10 and 20."""

    def root(barrier: int, snapshot: int) -> None:
        r = client.post("/tables/lake/db/r/barriers",
                        json={"snapshot_id": snapshot, "barrier": barrier})
        assert r.status_code == 200, r.text

    def commit(job: str, table: str, barrier: int, snapshot: int) -> None:
        r = client.post(f"/commit/{job}/lake/db/{table}",
                        json={"barrier": barrier, "snapshot_id": snapshot})
        assert r.status_code == 200, r.text

    for job, sink in (("A", "t1"), ("B", "t2")):
        assert client.post(f"/register/source/{job}/lake/db/r").status_code == 200
        assert client.post(f"/register/sink/{job}/lake/db/{sink}").status_code == 200
    root(10, 101)
    for job, sink, snapshot in (("A", "t1", 111), ("B", "t2", 121)):
        start = client.post(f"/jobs/{job}/start").json()
        assert start["action"] == "process" and start["barrier"] == 10, start
        commit(job, sink, 10, snapshot)
    root(20, 102)
    step = client.post("/jobs/B/barriers/next", json={"after": 10}).json()
    assert step["barrier"] == 20
    commit("B", "t2", 20, 122)
    root(30, 103)
    skip = client.post("/jobs/A/start", json={"from": 30}).json()
    assert skip["action"] == "process" and skip["barrier"] == 30, skip
    commit("A", "t1", 30, 113)


def test_fan_out_worked_example(client: httpx.Client) -> None:
    _fan_out(client)

    def versions(consistency: str, *tables: str, **extra: object) -> httpx.Response:
        return client.post("/versions", json={"consistency": consistency,
                                              "tables": [f"lake.db.{t}" for t in tables],
                                              **extra})

    strong = versions("strong", "r", "t1", "t2").json()["versions"]
    assert strong == {
        "lake.db.r": {"barrier": 10, "snapshot_id": 101, "snapshot_barrier": 10},
        "lake.db.t1": {"barrier": 10, "snapshot_id": 111, "snapshot_barrier": 10},
        "lake.db.t2": {"barrier": 10, "snapshot_id": 121, "snapshot_barrier": 10}}
    for table, snapshot in (("r", 101), ("t1", 111), ("t2", 121)):
        one = client.get(f"/version/strong/lake/db/{table}").json()
        assert (one["barrier"], one["snapshot_id"]) == (10, snapshot)
    weak = versions("weak", "t1", "r").json()["versions"]
    assert {t: (v["barrier"], v["snapshot_id"]) for t, v in weak.items()} == {
        "lake.db.t1": (30, 113), "lake.db.r": (30, 103)}
    weak = versions("weak", "t2", "r").json()["versions"]
    assert {t: (v["barrier"], v["snapshot_id"]) for t, v in weak.items()} == {
        "lake.db.t2": (20, 122), "lake.db.r": (20, 102)}
    weak = versions("weak", "t1", "t2").json()["versions"]
    assert {t: (v["barrier"], v["snapshot_id"]) for t, v in weak.items()} == {
        "lake.db.t1": (10, 111), "lake.db.t2": (10, 121)}
    refused = versions("strong", "t1", "t2", barrier=20)
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "barrier_not_exact"
    assert error["details"]["tables"] == ["lake.db.t1"]
    assert error["details"]["nearest"] == {"lake.db.t1": {"below": 10, "above": 30}}
