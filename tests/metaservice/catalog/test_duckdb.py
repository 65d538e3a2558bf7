"""DuckDB's iceberg extension against the catalog, with pyiceberg on the same tables: each reads
the other's commits, and DuckDB's INSERT INTO a root table completes a barrier
(docs/contract.md#commits-through-the-catalog)."""

from __future__ import annotations

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog

from metaservice.duckdb_offline import connect
from tests.conftest import ServerThread
from tests.metaservice.catalog.pipeline import FanOut
from tests.metaservice.catalog.test_pyiceberg import SCHEMA, barriers, head, rows
from tests.metaservice.jobs.test_jobs import plan

duckdb = pytest.importorskip("duckdb")

def attach(connection, server: ServerThread, warehouse: str, alias: str) -> None:  # type: ignore[no-untyped-def]
    connection.execute(f"ATTACH '{warehouse}' AS {alias} (TYPE iceberg, "
                       f"ENDPOINT '{server.url}/iceberg', AUTHORIZATION_TYPE 'none')")


@pytest.fixture
def duck(server: ServerThread):  # type: ignore[no-untyped-def]
    """A DuckDB connection (the extensions loaded from their packages, as the demo and
    ``metaservice duckdb`` load them) with the catalog attached as ``lake``."""
    connection = connect()
    attach(connection, server, "lake", "lake")
    yield connection
    connection.close()


def test_duckdb_and_pyiceberg_read_each_others_commits(
        catalog: RestCatalog, client: httpx.Client, server: ServerThread, duck) -> None:  # type: ignore[no-untyped-def]
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA).append(rows(1, 2))
    assert duck.execute("SELECT id, v FROM lake.db.t ORDER BY id").fetchall() == [
        (1, "r1"), (2, "r2")]

    duck.execute("INSERT INTO lake.db.t VALUES (3, 'duck')")
    table = catalog.load_table("db.t")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    # DuckDB's INSERT INTO a root table completed a barrier with the snapshot it added.
    recorded = barriers(client, "lake.db.t")
    assert len(recorded) == 2 and recorded[0][1] == head(catalog, "db.t")

    table.append(rows(4))
    duck.execute("DETACH lake")  # a new attachment sees the newest metadata
    attach(duck, server, "lake", "lake")
    assert [r[0] for r in duck.execute("SELECT id FROM lake.db.t ORDER BY id").fetchall()] == [
        1, 2, 3, 4]


def test_duckdb_cannot_write_a_derived_table(catalog: RestCatalog, client: httpx.Client,
                                             duck) -> None:  # type: ignore[no-untyped-def]
    catalog.create_namespace("db")
    catalog.create_table("db.src", schema=SCHEMA).append(
        rows(1), snapshot_properties={"metaservice.barrier": "100"})
    catalog.create_table("db.out", schema=SCHEMA)
    plan(client, "etl", ["lake.db.src"], ["lake.db.out"])
    assert client.post("/jobs/etl/start", json={"from": "latest"}).status_code == 200
    with pytest.raises(duckdb.Error, match="table_has_writer"):
        duck.execute("INSERT INTO lake.db.out VALUES (9, 'x')")
    assert head(catalog, "db.out") is None
    assert barriers(client, "lake.db.out") == []


JOIN = """
    SELECT (SELECT count(*) FROM {c}.db.orders) AS orders,
           (SELECT count(*) FROM {c}.db.orders o JOIN {c}.db.a USING (id)) AS in_a,
           (SELECT count(*) FROM {c}.db.orders o JOIN {c}.db.b USING (id)) AS in_b,
           (SELECT count(*) FROM {c}.db.a) AS a,
           (SELECT count(*) FROM {c}.db.b) AS b
"""


def test_duckdb_reads_one_cut_through_a_strong_read_session(
        catalog: RestCatalog, client: httpx.Client, server: ServerThread, clock, duck) -> None:  # type: ignore[no-untyped-def]
    """A join of the three tables of a pipeline with fan-out, while its slow sibling lags:
    through ``lake@strong`` every table is at one barrier, through the head they are not."""
    pipeline = FanOut(catalog, client, clock)
    pipeline.ingest(3)
    pipeline.step("a"), pipeline.step("b")
    pipeline.ingest(2)
    pipeline.step("a")  # b lags one barrier behind
    attach(duck, server, "lake@strong", "strong")
    assert duck.execute(JOIN.format(c="strong")).fetchone() == (3, 3, 3, 3, 3)
    duck.execute("DETACH lake")
    attach(duck, server, "lake", "lake")
    head_counts = duck.execute(JOIN.format(c="lake")).fetchone()
    assert head_counts == (5, 5, 3, 5, 3)  # the head mixes two barriers
    # The attachment keeps its cut while the pipeline moves on; a new one sees the new cut.
    pipeline.step("b")
    pipeline.ingest(1)
    pipeline.step("a")
    assert duck.execute(JOIN.format(c="strong")).fetchone() == (3, 3, 3, 3, 3)
    duck.execute("DETACH strong")
    attach(duck, server, "lake@strong", "strong")
    assert duck.execute(JOIN.format(c="strong")).fetchone() == (5, 5, 5, 5, 5)
    with pytest.raises(duckdb.Error, match="read-only session"):
        duck.execute("INSERT INTO strong.db.orders VALUES (99)")


def test_duckdb_lists_only_the_snapshots_of_the_cut_in_a_strong_read_session(
        catalog: RestCatalog, client: httpx.Client, server: ServerThread, clock, duck) -> None:  # type: ignore[no-untyped-def]
    """DuckDB's ``iceberg_snapshots`` on an attached table lists the snapshots of the file at
    ``metadata-location``, not of the answer's JSON: in a strong read session it lists none
    newer than the cut, through the head it lists them."""
    pipeline = FanOut(catalog, client, clock)
    first = pipeline.ingest(3)
    pipeline.step("a"), pipeline.step("b")
    pipeline.ingest(2)
    pipeline.step("a")  # a's head is one barrier past the strong cut
    answer = client.post("/versions", json={"tables": ["lake.db.a"], "barrier": first})
    cut = int(answer.json()["versions"]["lake.db.a"]["snapshot_id"])
    head_snapshots = {s.snapshot_id for s in catalog.load_table("db.a").snapshots()}
    cut_time = next(s.timestamp_ms for s in catalog.load_table("db.a").snapshots()
                    if s.snapshot_id == cut)
    newer = {s.snapshot_id for s in catalog.load_table("db.a").snapshots()
             if s.timestamp_ms > cut_time}
    assert newer

    attach(duck, server, "lake@strong", "strong")
    listed = {row[0] for row in duck.execute(
        "SELECT snapshot_id FROM iceberg_snapshots(strong.db.a)").fetchall()}
    assert cut in listed and not listed & newer
    assert {row[0] for row in duck.execute(
        "SELECT snapshot_id FROM iceberg_snapshots(lake.db.a)").fetchall()} == head_snapshots


def test_duckdb_reads_and_writes_a_table_named_beyond_plain_letters(
        catalog: RestCatalog, server: ServerThread, duck) -> None:  # type: ignore[no-untyped-def]
    """A namespace of two levels, ``("sales dept", "eu.west")``, and a table ``commandes été``:
    a space, a dot and a non-ASCII letter. DuckDB's limits show: attached as the other tests
    attach (its default), it lists the first level only; with ``SUPPORT_NESTED_NAMESPACES
    true`` it names a nested namespace by its levels joined with a dot (``"sales
    dept.eu.west"``) and, asked for that name before it has listed the namespaces, splits it
    at every dot (three levels, ``sales dept``/``eu``/``west``: 404). Once it has listed them
    it reads and writes the table."""
    catalog.create_namespace(("sales dept",))
    catalog.create_namespace(("sales dept", "eu.west"))
    identifier = ("sales dept", "eu.west", "commandes été")
    catalog.create_table(identifier, schema=SCHEMA).append(rows(1, 2))
    listing = "SELECT schema_name FROM information_schema.schemata WHERE catalog_name = 'lake'"
    table = 'lake."sales dept.eu.west"."commandes été"'

    schemas = {row[0] for row in duck.execute(listing).fetchall()}
    assert "sales dept" in schemas and not any("eu.west" in s for s in schemas)

    def attach_nested():  # type: ignore[no-untyped-def]
        connection = connect()
        connection.execute(f"ATTACH 'lake' AS lake (TYPE iceberg, ENDPOINT '{server.url}/iceberg',"
                           " AUTHORIZATION_TYPE 'none', SUPPORT_NESTED_NAMESPACES true)")
        return connection

    unlisted = attach_nested()
    with pytest.raises(duckdb.CatalogException, match="does not exist"):
        unlisted.execute(f"SELECT id FROM {table}")
    unlisted.close()

    nested = attach_nested()
    assert "sales dept.eu.west" in {row[0] for row in nested.execute(listing).fetchall()}
    assert nested.execute(f"SELECT id, v FROM {table} ORDER BY id").fetchall() == [
        (1, "r1"), (2, "r2")]
    nested.execute(f"INSERT INTO {table} VALUES (3, 'août')")
    nested.close()
    assert sorted(catalog.load_table(identifier).scan().to_arrow().to_pylist(),
                  key=lambda r: r["id"]) == [
        {"id": 1, "v": "r1"}, {"id": 2, "v": "r2"}, {"id": 3, "v": "août"}]
