"""Two engines committing to one table at once (docs/contract.md#concurrency): pointer swaps are
compare-and-swap, so one wins, the other gets 409 CommitFailedException and its client retries; no
acknowledged commit is ever lost, and every snapshot on main completed exactly one barrier."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.conftest import ServerThread
from tests.metaservice.catalog.conftest import rest_catalog
from tests.metaservice.catalog.test_pyiceberg import SCHEMA, barriers, rows

TABLE = "/iceberg/v1/namespaces/db/tables/t"


def test_two_pyiceberg_writers_append_concurrently(server: ServerThread,
                                                   client: httpx.Client) -> None:
    setup = rest_catalog(server.url)
    setup.create_namespace("db")
    # Generous retries: each writer may lose every race of a round to the other.
    setup.create_table("db.t", schema=SCHEMA, properties={"commit.retry.num-retries": "20",
                                                          "commit.retry.min-wait-ms": "10",
                                                          "commit.retry.max-wait-ms": "200"})
    start = threading.Barrier(2)

    def writer(offset: int) -> None:
        table = rest_catalog(server.url).load_table("db.t")
        start.wait()
        for i in range(3):
            table.append(rows(offset + i))

    with ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(writer, 0), pool.submit(writer, 100)]:
            future.result()
    table = setup.load_table("db.t")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [0, 1, 2, 100, 101, 102]
    main = []
    snapshot = table.current_snapshot()
    while snapshot is not None:
        main.append(snapshot.snapshot_id)
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) \
            if snapshot.parent_snapshot_id is not None else None
    assert len(main) == 6  # one linear history: no commit was lost or forked
    assert sorted(s for _, s, _ in barriers(client, "lake.db.t")) == sorted(main)


def test_concurrent_commits_never_lose_an_acknowledged_one(server: ServerThread,
                                                           client: httpx.Client) -> None:
    """Commits without requirements race only on the pointer swap itself."""
    rest_catalog(server.url).create_namespace("db")
    rest_catalog(server.url).create_table("db.t", schema=SCHEMA)
    start = threading.Barrier(8)

    def commit(i: int) -> tuple[int, httpx.Response]:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            start.wait()
            return i, http.post(TABLE, json={"requirements": [], "updates": [
                {"action": "set-properties", "updates": {f"k{i}": "1"}}]})

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(commit, range(8)))
    acknowledged = set()
    for i, response in answers:
        if response.status_code == 200:
            acknowledged.add(f"k{i}")
        else:
            assert response.status_code == 409, response.text
            assert response.json()["error"]["type"] == "CommitFailedException"
    properties = client.get(TABLE).json()["metadata"]["properties"]
    assert acknowledged and acknowledged == {k for k in properties if k.startswith("k")}
