"""Version answers for many tables at once: one request spans the statement batches (padded
sizes, more than 256 tables) and the PostgreSQL array path, with unknown tables, tables that
have no snapshot at the cut, and an approved snapshot among them."""

from __future__ import annotations

import uuid

import httpx

from tests.metaservice.barriers.test_barriers import root
from tests.metaservice.test_errors import assert_error

COUNT = 300  # more than one SQLite batch (256)


def test_versions_of_hundreds_of_tables(client: httpx.Client) -> None:
    database = f"many{uuid.uuid4().hex[:8]}"
    tables = [f"lake.{database}.t{i}" for i in range(COUNT)]
    for i, table in enumerate(tables):
        assert root(client, table, 1000 + i, 10).status_code == 200
        if i % 3:  # two tables in three complete barrier 20
            assert root(client, table, 2000 + i, 20).status_code == 200
        assert root(client, table, 3000 + i, 30).status_code == 200

    weak = client.post("/versions", json={"consistency": "weak", "tables": tables})
    assert weak.status_code == 200, weak.text
    expected = {t: {"barrier": 30, "snapshot_id": 3000 + i, "snapshot_barrier": 30}
                for i, t in enumerate(tables)}
    assert weak.json()["versions"] == expected

    # Every root table is a component of its own: its strong cut is its latest barrier.
    strong = client.post("/versions", json={"consistency": "strong", "tables": tables[::-1]})
    assert strong.status_code == 200, strong.text
    assert strong.json()["versions"] == expected

    at_25 = client.post("/versions", json={"barrier": 25, "tables": tables})
    assert at_25.status_code == 200, at_25.text
    assert at_25.json()["versions"] == {
        t: ({"barrier": 25, "snapshot_id": 2000 + i, "snapshot_barrier": 20} if i % 3
            else {"barrier": 25, "snapshot_id": 1000 + i, "snapshot_barrier": 10})
        for i, t in enumerate(tables)}

    before_any = client.post("/versions", json={"barrier": 5, "tables": tables[:20]})
    assert_error(before_any, 404, "no_version")
    assert sorted(before_any.json()["error"]["details"]["tables"]) == sorted(tables[:20])

    unknown = f"lake.{database}.never"
    missing = client.post("/versions", json={"consistency": "weak",
                                             "tables": [*tables, unknown]})
    assert assert_error(missing, 404, "unknown_table")["details"]["tables"] == [unknown]

    last = tables[297]  # barrier 10, then 30: its version at 25 is snapshot 1297
    approved = client.post(f"/tables/{last.replace('.', '/')}/expirations",
                           json={"snapshot_ids": [1297]})
    assert approved.status_code == 201, approved.text
    gone = client.post("/versions", json={"barrier": 25, "tables": tables})
    assert_error(gone, 410, "snapshot_expired")
    assert gone.json()["error"]["details"]["snapshots"] == [{"table": last,
                                                            "snapshot_id": 1297}]
