"""A catalog server killed with SIGKILL mid-commit (docs/contract.md#the-built-in-catalog): no
pointer without its barrier, no barrier without its pointer, every acknowledged commit kept; an
unreferenced metadata file at most. The server runs as its own process (``metaservice serve``), on
both backends."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pyiceberg.table import Table
from sqlalchemy import create_engine, text

from tests.metaservice.catalog.conftest import rest_catalog
from tests.metaservice.catalog.test_pyiceberg import SCHEMA, barriers, rows
from tests.metaservice.test_durability import ServerProcess

pytestmark = pytest.mark.slow  # a catalog server process, killed mid-commit

CRASHES = 2
NO_RETRY = {"commit.retry.num-retries": "0"}


@pytest.fixture
def catalog_server(server_database_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(server_database_url, tmp_path / "server.log",
                           env={"METASERVICE_WAREHOUSE": str(tmp_path / "warehouse")})
    server.start()
    yield server
    server.kill()


def main_history(table: Table) -> list[int]:
    found, snapshot = [], table.current_snapshot()
    while snapshot is not None:
        found.append(snapshot.snapshot_id)
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return found


def test_sigkill_during_commits_keeps_pointers_and_barriers_together(
        catalog_server: ServerProcess) -> None:
    setup = rest_catalog(catalog_server.url)
    setup.create_namespace("db")
    setup.create_table("db.t", schema=SCHEMA, properties=NO_RETRY)
    acknowledged: list[int] = []
    for crash in range(CRASHES):
        stop = threading.Event()

        def write(stop: threading.Event = stop, crash: int = crash) -> None:
            i = 0
            while not stop.is_set():
                try:
                    table = rest_catalog(catalog_server.url).load_table("db.t")
                    table.append(rows(crash * 1000 + i))
                    acknowledged.append(table.current_snapshot().snapshot_id)  # type: ignore[union-attr]
                except Exception:  # noqa: BLE001 - the server is being killed
                    return
                i += 1

        writer = threading.Thread(target=write)
        writer.start()
        # the kill lands mid-write after a few acknowledged commits, a little later each crash
        deadline = time.monotonic() + 60
        while len(acknowledged) < 2 + crash and writer.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05 * crash)
        catalog_server.kill()
        stop.set()
        writer.join(timeout=60)
        catalog_server.start()

        table = rest_catalog(catalog_server.url).load_table("db.t")
        history = main_history(table)
        assert set(acknowledged) <= set(history)
        with httpx.Client(base_url=catalog_server.url) as http:
            recorded = [s for _, s, _ in barriers(http, "lake.db.t")]
        assert sorted(recorded) == sorted(history)  # each snapshot on main, one barrier
    assert len(acknowledged) >= CRASHES


def test_sigkill_between_the_metadata_file_and_the_commit_leaves_only_a_file(
        backend: str, catalog_server: ServerProcess, server_database_url: str,
        tmp_path: Path) -> None:
    """PostgreSQL lets the test hold the pointer's row lock: the server writes the new metadata
    file, then waits on the lock to swap the pointer, and is killed right there."""
    if backend != "postgresql":
        pytest.skip("holding one row's lock from outside needs PostgreSQL")
    catalog = rest_catalog(catalog_server.url)
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA, properties=NO_RETRY).append(rows(1))
    before = catalog.load_table("db.t")
    metadata_dir = tmp_path / "warehouse" / "db" / "t" / "metadata"
    files_before = set(metadata_dir.glob("*.metadata.json"))

    engine = create_engine(server_database_url)
    with engine.connect() as holder:
        holder.execute(text("SELECT version FROM catalog_tables WHERE namespace = 'db' "
                            "AND name = 't' FOR UPDATE"))
        writer = threading.Thread(target=lambda: _try(lambda: before.append(rows(2))))
        writer.start()
        deadline = time.monotonic() + 60
        while set(metadata_dir.glob("*.metadata.json")) == files_before:
            assert time.monotonic() < deadline, "the server wrote no metadata file"
            time.sleep(0.02)
        time.sleep(0.2)  # the swap is waiting on the lock
        catalog_server.kill()
        holder.rollback()
    writer.join(timeout=60)
    engine.dispose()

    catalog_server.start()
    after = rest_catalog(catalog_server.url).load_table("db.t")
    assert after.metadata_location == before.metadata_location
    with httpx.Client(base_url=catalog_server.url) as http:
        assert [s for _, s, _ in barriers(http, "lake.db.t")] == main_history(after)
    orphans = set(metadata_dir.glob("*.metadata.json")) - files_before
    assert len(orphans) == 1 and str(next(iter(orphans))) != after.metadata_location


def _try(action) -> None:  # type: ignore[no-untyped-def]
    with contextlib.suppress(Exception):  # the server was killed under it
        action()
