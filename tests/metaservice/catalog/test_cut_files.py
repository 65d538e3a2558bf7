"""Read sessions' cut files (docs/contract.md#a-table-at-a-cut) are deleted once no session can use
them: after the catalog commit that expires their snapshot, or with their table's purge. Both
backends, over the real server and pyiceberg's REST client."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError
from sqlalchemy import select

from metaservice.clock import ManualClock
from metaservice.db.models import CutFileRow
from metaservice.db.session import Database
from tests.conftest import ServerThread
from tests.metaservice.catalog.pipeline import SCHEMA, FanOut
from tests.metaservice.catalog.test_read_sessions import read_session, snapshot_at

SESSION_MS = 3600 * 1000  # METASERVICE_READ_SESSION_SECONDS of the tests' settings
LONGEST_MS = SESSION_MS + SESSION_MS // 10  # the longest a session lasts after its last use


@pytest.fixture
def pipeline(catalog: RestCatalog, client: httpx.Client, clock: ManualClock) -> FanOut:
    return FanOut(catalog, client, clock)


def local(location: str) -> Path:
    return Path(location.removeprefix("file://"))


def recorded(database: Database) -> dict[str, tuple[str, int]]:
    """``{location: (table_uuid, snapshot_id)}`` of the recorded cut files."""
    with database.read_session() as session:
        return {row.location: (row.table_uuid, row.snapshot_id)
                for row in session.scalars(select(CutFileRow))}


def uuid_of(catalog: RestCatalog, name: str) -> str:
    return str(catalog.load_table(name).metadata.table_uuid)


def eventually(condition: Callable[[], bool], what: str) -> None:
    """Files go after the commit is answered (as a drop's purge does): wait for them."""
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def expire(catalog: RestCatalog, table: str, *snapshot_ids: int) -> None:
    catalog.load_table(table).maintenance.expire_snapshots().by_ids(list(snapshot_ids)).commit()


def test_expiring_a_cut_snapshot_deletes_its_cut_file_once_no_session_holds_it(
        pipeline: FanOut, catalog: RestCatalog, client: httpx.Client, server: ServerThread,
        clock: ManualClock, database: Database) -> None:
    """A session's lease keeps its cut file (a refused expiration deletes nothing); once the
    session is gone, the commit that expires the cut snapshot deletes the file and its row,
    and leaves the files of cuts still leased."""
    first = pipeline.ingest(1)
    pipeline.step("a"), pipeline.step("b")
    old = read_session(server).load_table("db.orders")
    at_first = snapshot_at(client, "lake.db.orders", first)
    assert old.metadata.current_snapshot_id == at_first
    assert local(old.metadata_location).is_file()
    assert recorded(database) == {old.metadata_location: (uuid_of(catalog, "db.orders"),
                                                          at_first)}

    clock.advance(SESSION_MS - 100_000)
    second = pipeline.ingest(1)
    pipeline.step("a"), pipeline.step("b")
    new = read_session(server).load_table("db.orders")
    at_second = snapshot_at(client, "lake.db.orders", second)
    assert new.metadata.current_snapshot_id == at_second
    third = pipeline.ingest(1)  # the head moves past the second cut: it may be expired too
    pipeline.step("a"), pipeline.step("b")
    assert snapshot_at(client, "lake.db.orders", third) not in (at_first, at_second)

    # Both sessions live: expiring either cut is refused, and deletes nothing.
    for leased in (at_first, at_second):
        with pytest.raises(BadRequestError, match="snapshot_protected"):
            expire(catalog, "db.orders", leased)
    assert local(old.metadata_location).is_file() and local(new.metadata_location).is_file()
    assert set(recorded(database)) == {old.metadata_location, new.metadata_location}

    clock.advance(LONGEST_MS - SESSION_MS + 200_000)  # the old session is over, the new not
    with pytest.raises(BadRequestError, match="snapshot_protected"):
        expire(catalog, "db.orders", at_first, at_second)
    assert local(old.metadata_location).is_file()
    assert set(recorded(database)) == {old.metadata_location, new.metadata_location}

    expire(catalog, "db.orders", at_first)
    eventually(lambda: not local(old.metadata_location).exists(),
               "the expired cut's file was left behind")
    assert recorded(database) == {new.metadata_location: (uuid_of(catalog, "db.orders"),
                                                          at_second)}
    assert local(new.metadata_location).is_file()
    assert read_session(server).load_table("db.orders").metadata.current_snapshot_id != at_first


def test_a_purge_deletes_the_tables_cut_files(
        pipeline: FanOut, catalog: RestCatalog, server: ServerThread, warehouse: Path,
        database: Database) -> None:
    """Nothing of a purged table is left in its directory, cut files included; the cut files
    of other tables stay."""
    first = pipeline.ingest(1)
    pipeline.step("a"), pipeline.step("b")
    strong = read_session(server)
    served = strong.load_table("db.a")
    orders = strong.load_table("db.orders")
    at_barrier = read_session(server, f"lake@barrier={first}").load_table("db.a")
    assert served.metadata_location != at_barrier.metadata_location
    assert local(served.metadata_location).is_file()

    pipeline.client.post("/unregister/a")  # a table a running job writes is not dropped
    catalog.purge_table("db.a")
    eventually(lambda: not [p for p in (warehouse / "db" / "a").rglob("*") if p.is_file()],
               "the purge left files behind")
    assert set(recorded(database)) == {orders.metadata_location}
    assert local(orders.metadata_location).is_file()


def test_a_plain_drop_leaves_cut_files_and_forgets_them(
        pipeline: FanOut, catalog: RestCatalog, server: ServerThread,
        database: Database) -> None:
    """A drop without purge deletes no file (a client may still read it, as Iceberg leaves a
    dropped table's files), and forgets the rows: a later table of that name starts with
    none. That table's purge empties the locations it claimed, so it deletes what the dropped
    table left there too (docs/decisions.md, *Drop with purge*)."""
    pipeline.ingest(1)
    pipeline.step("a"), pipeline.step("b")
    served = read_session(server).load_table("db.a")
    pipeline.client.post("/unregister/a")  # a table a running job writes is not dropped
    catalog.drop_table("db.a")
    assert local(served.metadata_location).is_file()
    assert recorded(database) == {}

    assert local(served.metadata_location).is_file()  # the new table's claim changes nothing
    catalog.create_table("db.a", schema=SCHEMA)
    assert local(served.metadata_location).is_file()
    catalog.purge_table("db.a")
    eventually(lambda: not local(served.metadata_location).exists(),
               "the purge left a file under the location it claimed")


def test_cut_files_follow_a_renamed_table(
        catalog: RestCatalog, server: ServerThread, clock: ManualClock,
        database: Database) -> None:
    """A renamed table keeps its files and its identity (its table-uuid), which its cut files
    are recorded under: expiring the cut snapshot through the new name deletes them."""
    catalog.create_namespace("db")
    table = catalog.create_table("db.solo", schema=SCHEMA)
    for i in range(2):
        clock.advance(10)
        table.append(pa.table({"id": [i]}, schema=SCHEMA),
                     snapshot_properties={"metaservice.barrier": str(clock.now_ms())})
    served = read_session(server).load_table("db.solo")
    cut = served.metadata.current_snapshot_id
    assert cut is not None
    table.refresh()
    clock.advance(10)
    table.append(pa.table({"id": [2]}, schema=SCHEMA),
                 snapshot_properties={"metaservice.barrier": str(clock.now_ms())})

    catalog.rename_table("db.solo", "db.moved")
    assert recorded(database) == {served.metadata_location: (uuid_of(catalog, "db.moved"),
                                                             cut)}
    clock.advance(LONGEST_MS + 1)
    expire(catalog, "db.moved", cut)
    eventually(lambda: not local(served.metadata_location).exists(),
               "the renamed table's cut file was left behind")
    assert recorded(database) == {}
