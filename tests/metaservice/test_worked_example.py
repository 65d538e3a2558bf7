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
        "lake.db.table1": {"barrier": 20, "snapshot_id": 102},
        "lake.db.table2": {"barrier": 20, "snapshot_id": 202}}}

    r = client.post("/versions", json={"tables": ["lake.db.table1", "lake.db.table2"],
                                       "barrier": 30})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "barrier_not_complete"
    assert r.json()["error"]["details"]["tables"] == ["lake.db.table2"]

    ok = client.post("/versions", json={"tables": ["lake.db.table1", "lake.db.table2"],
                                        "barrier": 20}).json()
    assert ok["consistency"] == "barrier"
    assert ok["versions"]["lake.db.table1"] == {"barrier": 20, "snapshot_id": 102}
