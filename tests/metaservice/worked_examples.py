"""The chain example of docs/contract.md#worked-examples built through the real HTTP API, for tests
that start from it (its checks are tests/metaservice/protocol/test_examples.py)."""

from __future__ import annotations

import httpx


def spec_chain(client: httpx.Client) -> None:
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

