"""Purges from the record written with their drop (``catalog/tables/purges.py``), on a real S3
server (SeaweedFS) and both database backends: the drop records the purge and holds the table's
claims, the finished purge deletes the record; nothing outside the table's claims, or inside a
location another claims, is deleted; a server killed mid-purge has the purge finished by the next
server process, with no user action; two workers never both hold one purge."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog
from sqlalchemy import create_engine, select, text

from metaservice.auth.service import ANONYMOUS_ADMIN
from metaservice.catalog.storage.warehouse import Warehouse
from metaservice.catalog.tables import repository as repo
from metaservice.catalog.tables import service as tables
from metaservice.catalog.tables.purges import PendingPurge, PurgeWorker
from metaservice.clock import ManualClock
from metaservice.db.engine import build_engine
from metaservice.db.models import CatalogLocationRow, CatalogPurgeRow
from metaservice.db.session import Database
from metaservice.settings import Settings
from tests.conftest import ServerThread
from tests.metaservice.catalog.conftest import rest_catalog
from tests.metaservice.catalog.test_s3 import ROWS, eventually, keys, s3_settings
from tests.metaservice.catalog.test_vended_credentials import status_of
from tests.metaservice.test_durability import ServerProcess

pytestmark = pytest.mark.slow  # a real S3 server; one test runs and kills server processes


@pytest.fixture
def store(seaweedfs: Any) -> Any:
    return seaweedfs


@pytest.fixture
def prefix() -> str:
    import uuid

    return f"wh-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def settings(database_url: str, store: Any, prefix: str) -> Settings:
    return s3_settings(database_url, store, prefix)


@pytest.fixture
def catalog(server: ServerThread, store: Any) -> RestCatalog:
    return rest_catalog(server.url, **store.file_io_properties())


def put_objects(store: Any, names: list[str]) -> None:
    client = store.client()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: client.put_object(Bucket=store.bucket, Key=name, Body=b"x"),
                      names))


def purge_rows(database: Database) -> list[CatalogPurgeRow]:
    with database.transaction(write=False) as session:
        rows = list(session.scalars(select(CatalogPurgeRow)))
        session.expunge_all()
        return rows


def claims(database: Database, table_uuid: str) -> list[str]:
    with database.transaction(write=False) as session:
        return list(session.scalars(select(CatalogLocationRow.location).where(
            CatalogLocationRow.table_uuid == table_uuid)))


def test_a_drop_records_its_purge_and_the_finished_purge_deletes_it(
        app: Any, catalog: RestCatalog, database: Database, clock: ManualClock, store: Any,
        prefix: str) -> None:
    """The record is written in the drop's transaction, held by the worker that answers the
    drop, and keeps the table's location claimed (a create there is refused) until the purge,
    page by page, deleted every object under it; then the record and the claims go."""
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=ROWS.schema)
    table.append(ROWS)
    table.append(ROWS)
    put_objects(store, [f"{prefix}/db/t/data/orphan-{i:03}" for i in range(40)])
    assert len(keys(store, f"{prefix}/db/t/")) > 40
    table_uuid = str(table.metadata.table_uuid)
    worker = PurgeWorker(database, app.state.catalog.warehouse, clock=clock, page_size=7,
                         claim_seconds=60, name="request-process")

    dropped = tables.drop_table(database, app.state.catalog, ["db"], "t", ANONYMOUS_ADMIN,
                                purges=worker)

    location = f"s3://lake/{prefix}/db/t"
    assert dropped.purge == PendingPurge(table_uuid, table.metadata_location, [location])
    [row] = purge_rows(database)
    assert (row.table_uuid, row.metadata_location, row.claims) == (
        table_uuid, table.metadata_location, [location])
    assert (row.claimed_by, row.claimed_until) == ("request-process", clock.now_ms() + 60_000)
    assert claims(database, table_uuid) == [location]
    with pytest.raises(Exception, match="purged|overlaps"):
        catalog.create_table("db.again", schema=ROWS.schema, location=location)

    assert worker.purge(dropped.purge)
    assert keys(store, f"{prefix}/db/t/") == []
    assert purge_rows(database) == []
    assert claims(database, table_uuid) == []
    catalog.create_table("db.again", schema=ROWS.schema, location=location)  # free again


def test_a_purge_deletes_nothing_of_a_sibling_prefix_or_of_a_location_another_claims(
        app: Any, catalog: RestCatalog, database: Database, clock: ManualClock, store: Any,
        prefix: str) -> None:
    """``db/t2`` begins with ``db/t`` as a string: S3 lists it under the prefix ``db/t``, not
    under ``db/t/``. A location another table claims inside the purged one (none can be
    claimed through the catalog; written here as if one were) keeps its objects too."""
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=ROWS.schema).append(ROWS)
    sibling = catalog.create_table("db.t2", schema=ROWS.schema)
    sibling.append(ROWS)
    put_objects(store, [f"{prefix}/db/t-notes.txt", f"{prefix}/db/t2/data/extra"]
                + [f"{prefix}/db/t/nested/{i}" for i in range(5)]
                + [f"{prefix}/db/t/data/more-{i}" for i in range(12)])
    with database.transaction(write=True) as session:
        repo.add_claims(session, "another-table", [f"s3://lake/{prefix}/db/t/nested"],
                        clock.now_ms())
    kept = sorted(keys(store, f"{prefix}/db/t2/") + keys(store, f"{prefix}/db/t-")
                  + keys(store, f"{prefix}/db/t/nested/"))
    app.state.catalog_purges.page_size = 5

    catalog.purge_table("db.t")

    eventually(lambda: purge_rows(database) == [], "the purge did not finish")
    assert sorted(keys(store, f"{prefix}/db/t")) == kept
    assert catalog.load_table("db.t2").scan().to_arrow().num_rows == 3


def test_a_table_created_right_after_a_drop_with_purge_takes_its_location(
        catalog: RestCatalog, database: Database, store: Any, prefix: str) -> None:
    """The drop answers once its purge finished (``PURGE_ANSWER_SECONDS``, 5 s by default, is
    plenty for a few hundred objects): the location is free when a script creates the table
    again right after dropping it, as ``DROP TABLE … PURGE`` then ``CREATE TABLE`` does."""
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=ROWS.schema).append(ROWS)
    put_objects(store, [f"{prefix}/db/t/data/more-{i:03}" for i in range(300)])

    catalog.purge_table("db.t")
    again = catalog.create_table("db.t", schema=ROWS.schema)

    assert purge_rows(database) == []
    assert [k for k in keys(store, f"{prefix}/db/t/") if "/metadata/" not in k] == []
    again.append(ROWS)
    assert catalog.load_table("db.t").scan().to_arrow().num_rows == 3


def test_a_purge_a_killed_server_left_is_finished_by_the_next_server(
        server_database_url: str, store: Any, prefix: str, tmp_path: Path) -> None:
    """2,000 objects, purged 20 at a time by a ``metaservice serve`` process that is killed
    (SIGKILL) once some but not all are gone; a new server process on the same database
    finishes the purge, and deletes its record, with nobody asking."""
    environment = {**store.environment(),
                   "METASERVICE_WAREHOUSE": f"s3://{store.bucket}/{prefix}",
                   "METASERVICE_PURGE_ANSWER_SECONDS": "0",  # the drop answers at once
                   "METASERVICE_PURGE_PAGE_SIZE": "20", "METASERVICE_PURGE_CLAIM_SECONDS": "2",
                   "METASERVICE_PURGE_POLL_SECONDS": "0.5"}
    server = ServerProcess(server_database_url, tmp_path / "server.log", env=environment)
    server.start()
    try:
        catalog = rest_catalog(server.url, **store.file_io_properties())
        catalog.create_namespace("db")
        catalog.create_table("db.t", schema=ROWS.schema).append(ROWS)
        put_objects(store, [f"{prefix}/db/t/data/bulk-{i:04}" for i in range(2000)])
        total = len(keys(store, f"{prefix}/db/t/"))

        # A purge deletes in the store's listing order: once bulk-0100 is gone, about a
        # hundred objects are, and the rest take another ninety pages. One HEAD a probe (a
        # whole listing took long enough for the purge to end before the kill).
        s3 = store.client()
        catalog.purge_table("db.t")
        deadline = time.monotonic() + 60
        while status_of(lambda: s3.head_object(Bucket=store.bucket,
                                               Key=f"{prefix}/db/t/data/bulk-0100")) == 200:
            assert time.monotonic() < deadline, (
                f"the purge did not start; the log:\n{server.log.read_text()[-3000:]}")
            time.sleep(0.005)
        server.kill()
        left = len(keys(store, f"{prefix}/db/t/"))
        assert 0 < left < total, (f"{left} of {total} objects left: the kill missed the "
                                  f"purge; the log:\n{server.log.read_text()[-3000:]}")
        engine = create_engine(server_database_url)
        try:
            with engine.connect() as connection:
                recorded_at_kill = connection.execute(text(
                    "SELECT table_uuid, claimed_by FROM catalog_purges")).all()
            assert len(recorded_at_kill) == 1, recorded_at_kill

            server.env["METASERVICE_PURGE_PAGE_SIZE"] = "200"  # the rest at once
            server.start()  # a new process, the same database
            eventually(lambda: not keys(store, f"{prefix}/db/t/"),
                       lambda: f"{len(keys(store, prefix + '/db/t/'))} objects left after the "
                               f"restart; the log:\n{server.log.read_text()[-3000:]}",
                       seconds=120)

            def recorded() -> int:
                with engine.connect() as connection:
                    return int(connection.scalar(text("SELECT count(*) FROM catalog_purges")))

            eventually(lambda: recorded() == 0,
                       lambda: f"the record outlived its purge:\n{server.log.read_text()[-3000:]}")
        finally:
            engine.dispose()
    finally:
        server.kill()


def test_two_workers_never_both_take_one_purge(database_url: str, database: Database) -> None:
    """Each purge whose claim lapsed is taken by exactly one of two workers racing for them,
    each on its own connection pool, as two server processes on one database are."""
    clock = ManualClock()
    with database.transaction(write=True) as session:
        for i in range(30):
            repo.record_purge(session, f"uuid-{i:02}", "s3://lake/m.json", [f"s3://lake/t{i}"],
                              now_ms=clock.now_ms() - 10_000, claimed_by="dead", claim_ms=1)
    taken: dict[str, list[str]] = {}
    start = threading.Barrier(2)

    def take_all(worker: str) -> None:
        own = Database(build_engine(database_url))
        try:
            start.wait()
            while True:
                with own.transaction(write=True) as session:
                    purge = repo.take_lapsed_purge(session, worker=worker,
                                                   now_ms=clock.now_ms(), claim_ms=60_000)
                if purge is None:
                    return
                taken.setdefault(purge.table_uuid, []).append(worker)
        finally:
            own.dispose()

    threads = [threading.Thread(target=take_all, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(taken) == [f"uuid-{i:02}" for i in range(30)]
    assert {u: w for u, w in taken.items() if len(w) > 1} == {}


def test_a_worker_whose_claim_lapsed_deletes_nothing_more(
        database: Database, tmp_path: Path) -> None:
    """Worker a holds a purge and stalls past its claim; worker b takes it. a's next page finds
    its claim gone and stops before deleting; b finishes."""
    clock = ManualClock()
    directory = tmp_path / "warehouse" / "db" / "t"
    directory.mkdir(parents=True)
    for i in range(10):
        (directory / f"f{i}").write_bytes(b"x")
    warehouse = Warehouse(str(tmp_path / "warehouse"))
    claim = "file://" + str(directory.resolve())
    a = PurgeWorker(database, warehouse, clock=clock, page_size=3, claim_seconds=5, name="a")
    b = PurgeWorker(database, warehouse, clock=clock, page_size=3, claim_seconds=5, name="b")
    with database.transaction(write=True) as session:
        repo.add_claims(session, "u", [claim], clock.now_ms())
        repo.record_purge(session, "u", claim + "/m.json", [claim], now_ms=clock.now_ms(),
                          claimed_by="a", claim_ms=a.claim_ms)
    clock.advance(6_000)  # a stalled past its claim
    with database.transaction(write=True) as session:
        taken = repo.take_lapsed_purge(session, worker="b", now_ms=clock.now_ms(),
                                       claim_ms=b.claim_ms)
    assert taken is not None

    assert not a.purge(taken)
    assert len(list(directory.iterdir())) == 10, "a deleted files of a purge b holds"
    assert b.purge(taken)
    assert list(directory.iterdir()) == []
    assert purge_rows(database) == [] and claims(database, "u") == []



def test_a_stopping_worker_gives_its_purge_back(database: Database, tmp_path: Path) -> None:
    """A server that stops mid-purge gives the purge back at once, rather than holding it until
    its claim lapses: another worker takes it and finishes it without waiting."""
    clock = ManualClock()
    directory = tmp_path / "warehouse" / "db" / "t"
    directory.mkdir(parents=True)
    for i in range(4):
        (directory / f"f{i}").write_bytes(b"x")
    warehouse = Warehouse(str(tmp_path / "warehouse"))
    claim = "file://" + str(directory.resolve())
    a = PurgeWorker(database, warehouse, clock=clock, page_size=3, name="a")
    with database.transaction(write=True) as session:
        repo.add_claims(session, "u", [claim], clock.now_ms())
        repo.record_purge(session, "u", claim + "/m.json", [claim], now_ms=clock.now_ms(),
                          claimed_by="a", claim_ms=a.claim_ms)
    a.stop()

    assert not a.purge(PendingPurge("u", claim + "/m.json", [claim]))
    [row] = purge_rows(database)
    assert (row.claimed_by, row.claimed_until) == (None, None)
    assert PurgeWorker(database, warehouse, clock=clock, page_size=3, name="b").run_once() == 1
    assert list(directory.iterdir()) == [] and purge_rows(database) == []
