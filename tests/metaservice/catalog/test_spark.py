"""Spark 3.5 with the stock Apache Iceberg runtime (1.10) against the catalog, over loopback,
on PostgreSQL, the production store (docs/contract.md#the-built-in-catalog,
docs/contract.md#consistent-warehouses; what the database does in a catalog commit is tried on
both backends by the pyiceberg, DuckDB and race tests: Spark adds the engine, not the store):
Spark creates the tables, a job's Spark writes carry its barrier, Spark reads back and time-travels,
and its snapshot expiration is refused for protected snapshots; in a strong read session
(``warehouse=lake@strong``) Spark SQL joins the tables of a running pipeline at one barrier, where
the head mixes barriers.

One SparkSession (``tests/engines/spark35``, set up by its ``install.sh``) serves the module;
each test registers its own Spark catalogs on its own server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from metaservice.clock import ManualClock
from tests.conftest import ServerThread
from tests.engines.spark35.rig import SparkDriver, SparkError
from tests.metaservice.catalog.pipeline import (
    FanOut,
    broken_ids,
    strong_sessions_hold_while_the_head_mixes,
)
from tests.metaservice.catalog.test_pyiceberg import barriers
from tests.metaservice.jobs.test_jobs import plan

pytestmark = [pytest.mark.spark_jvm, pytest.mark.backends("postgresql")]

COLUMNS = "id long, amount long"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkDriver]:
    driver = SparkDriver(tmp_path_factory.mktemp("spark35") / "driver.log")
    yield driver
    driver.close()


@pytest.fixture
def lake(spark: SparkDriver, server: ServerThread) -> str:
    return spark.head_catalog(server.url)


RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"
"""What docs/engines.md tells a Spark 3.5 user to put in ``spark.jars.packages``."""


def test_spark_fetches_the_runtime_by_the_coordinates_the_docs_give(
        tmp_path: Path, server: ServerThread) -> None:
    """Spark's own way, as a user types it: ``spark.jars.packages`` with the documented
    coordinates (and no jar of ours) resolves the runtime and writes through the catalog."""
    documented = (Path(__file__).resolve().parents[3] / "docs" / "engines.md").read_text()
    assert f"`spark.jars.packages {RUNTIME}`" in documented
    driver = SparkDriver(tmp_path / "driver.log", packages=RUNTIME)
    try:
        driver.catalog("fetched", type="rest", uri=f"{server.url}/iceberg", warehouse="lake",
                       **{"cache-enabled": "false"})
        driver.sql("CREATE NAMESPACE fetched.db")
        driver.sql("CREATE TABLE fetched.db.t (id bigint) USING iceberg")
        driver.sql("INSERT INTO fetched.db.t VALUES (1), (2)")
        assert driver.sql("SELECT id FROM fetched.db.t ORDER BY id") == [[1], [2]]
    finally:
        driver.close()


def tags(job: str | None, barrier: int) -> dict[str, str]:
    """The write options that put MetaService's tags into the snapshot's summary."""
    options = {"snapshot-property.metaservice.barrier": str(barrier)}
    if job is not None:
        options["snapshot-property.metaservice.job"] = job
    return options


def snapshot_ids(spark: SparkDriver, table: str) -> list[int]:
    return [r[0] for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots "
                                     "ORDER BY committed_at")]


def test_a_spark_job_writes_its_barriers_and_reads_them_back(
        spark: SparkDriver, lake: str, client: httpx.Client) -> None:
    spark.sql(f"CREATE NAMESPACE {lake}.db")
    spark.sql(f"CREATE TABLE {lake}.db.orders (id bigint, amount bigint) USING iceberg")
    spark.sql(f"CREATE TABLE {lake}.db.totals (id bigint, amount bigint) USING iceberg")
    assert spark.sql(f"SHOW TABLES IN {lake}.db") == [["db", "orders", False],
                                                       ["db", "totals", False]]
    # Root ingestion: Spark's append completes the barrier it carries, in the commit itself.
    spark.append(f"{lake}.db.orders", COLUMNS, [(1, 10), (2, 20)], **tags(None, 100))
    [orders_100] = snapshot_ids(spark, f"{lake}.db.orders")
    assert barriers(client, "lake.db.orders") == [(100, orders_100, None)]

    plan(client, "enrich", ["lake.db.orders"], ["lake.db.totals"])
    answer = client.post("/jobs/enrich/start", json={"from": "latest"}).json()
    assert (answer["barrier"], answer["snapshots"]) == (100, {"lake.db.orders": orders_100})

    def process(answer: dict) -> None:
        """The job's step: the orders between its previous and its current snapshot, doubled."""
        orders = f"SELECT * FROM {lake}.db.orders VERSION AS OF"
        current = f"{orders} {answer['snapshots']['lake.db.orders']}"
        if answer["previous"]:
            current += f" EXCEPT {orders} {answer['previous']['lake.db.orders']}"
        rows = spark.sql(f"SELECT id, amount * 2 FROM ({current})")
        spark.append(f"{lake}.db.totals", COLUMNS, rows, **tags("enrich", answer["barrier"]))

    process(answer)
    [totals_100] = snapshot_ids(spark, f"{lake}.db.totals")
    assert barriers(client, "lake.db.totals") == [(100, totals_100, "enrich")]
    # Only its running job writes a derived table: Spark's INSERT INTO is refused.
    with pytest.raises(SparkError, match="metaservice table_has_writer"):
        spark.sql(f"INSERT INTO {lake}.db.totals VALUES (9, 9)")
    assert snapshot_ids(spark, f"{lake}.db.totals") == [totals_100]

    spark.append(f"{lake}.db.orders", COLUMNS, [(3, 30)], **tags(None, 200))
    answer = client.post("/jobs/enrich/barriers/next", json={"after": 100}).json()
    assert (answer["action"], answer["barrier"]) == ("process", 200)
    process(answer)
    totals_100, totals_200 = snapshot_ids(spark, f"{lake}.db.totals")
    assert barriers(client, "lake.db.totals") == [(200, totals_200, "enrich"),
                                                  (100, totals_100, "enrich")]
    strong = client.post("/versions", json={"consistency": "strong",
                                            "tables": ["lake.db.orders", "lake.db.totals"]})
    assert {t: (v["barrier"], v["snapshot_id"]) for t, v in strong.json()["versions"].items()} == {
        "lake.db.orders": (200, snapshot_ids(spark, f"{lake}.db.orders")[1]),
        "lake.db.totals": (200, totals_200)}

    # Spark reads the head and, by snapshot id, the table at barrier 100.
    assert spark.sql(f"SELECT * FROM {lake}.db.totals ORDER BY id") == [[1, 20], [2, 40], [3, 60]]
    assert spark.sql(f"SELECT * FROM {lake}.db.totals VERSION AS OF {totals_100} "
                     "ORDER BY id") == [[1, 20], [2, 40]]

    # Spark's snapshot expiration: refused while a reader leases the snapshot, then recorded.
    lease = client.post("/versions", json={"tables": ["lake.db.totals"], "barrier": 100,
                                           "lease_seconds": 300, "holder": "report"}).json()
    expire = (f"CALL {lake}.system.expire_snapshots(table => 'db.totals', "
              f"snapshot_ids => array({totals_100}))")
    with pytest.raises(SparkError, match=f"snapshot_protected.*lease:{lease['lease_id']}"):
        spark.sql(expire)
    assert snapshot_ids(spark, f"{lake}.db.totals") == [totals_100, totals_200]
    assert client.delete(f"/leases/{lease['lease_id']}").status_code == 204
    spark.sql(expire)
    assert snapshot_ids(spark, f"{lake}.db.totals") == [totals_200]
    gone = client.post("/versions", json={"tables": ["lake.db.totals"], "barrier": 100})
    assert (gone.status_code, gone.json()["error"]["code"]) == (410, "snapshot_expired")


def test_spark_joins_a_running_pipeline_at_one_barrier_in_a_strong_read_session(
        spark: SparkDriver, lake: str, catalog: RestCatalog, client: httpx.Client,
        clock: ManualClock, server: ServerThread) -> None:
    strong_sessions_hold_while_the_head_mixes(spark, lake, catalog, client, clock, server.url,
                                              rounds=6)


def test_open_read_session_opens_a_new_read_session_under_the_same_name(
        spark: SparkDriver, lake: str, catalog: RestCatalog, client: httpx.Client,
        clock: ManualClock) -> None:
    """``spark_plugin.open_read_session``: one call, and the same SQL reads the next cut."""
    pipeline = FanOut(catalog, client, clock)
    pipeline.ingest(2)
    first = pipeline.step("a")
    assert pipeline.step("b") == first
    session = spark.open_read_session(f"{lake}_session", catalog=lake)

    def barrier_of(table: str) -> int:
        [[_, value]] = spark.sql(f"SHOW TBLPROPERTIES {session}.db.{table} ('metaservice.barrier')")
        return int(value)

    assert broken_ids(spark, session) == (2, 0) and barrier_of("a") == first
    pipeline.ingest(3)
    second = pipeline.step("a")
    assert pipeline.step("b") == second
    assert broken_ids(spark, session) == (2, 0)  # the session keeps its cut
    assert spark.open_read_session(session, catalog=lake) == session
    assert broken_ids(spark, session) == (5, 0) and barrier_of("b") == second
    spark.open_read_session(session, catalog=lake, at=f"barrier={first}")
    assert broken_ids(spark, session) == (2, 0) and barrier_of("orders") == first
    with pytest.raises(SparkError, match="no catalog 'nowhere'") as refused:
        spark.open_read_session(session, catalog="nowhere")
    assert refused.value.type == "CatalogConfigError"


def test_spark_creates_selects_replaces_renames_and_drops_an_iceberg_view(
        spark: SparkDriver, lake: str, catalog: RestCatalog, server: ServerThread) -> None:
    """Iceberg views (the SQL objects) through the catalog: Spark's ``CREATE VIEW``, a
    ``SELECT`` from it, ``CREATE OR REPLACE VIEW`` (a commit of a new version), ``ALTER VIEW …
    RENAME TO`` and ``DROP VIEW``; pyiceberg reads what Spark wrote; a read session lists and
    loads the view and refuses to change it."""
    spark.sql(f"CREATE NAMESPACE {lake}.db")
    spark.sql(f"CREATE TABLE {lake}.db.orders (id bigint, amount bigint) USING iceberg")
    spark.append(f"{lake}.db.orders", COLUMNS, [(1, 10), (2, 20)], **tags(None, 100))
    spark.sql(f"CREATE VIEW {lake}.db.big (id COMMENT 'order id') COMMENT 'large orders' AS "
              f"SELECT id FROM {lake}.db.orders WHERE amount > 15")
    assert spark.sql(f"SHOW VIEWS IN {lake}.db") == [["db", "big", False]]
    assert spark.sql(f"SELECT * FROM {lake}.db.big") == [[2]]
    view = catalog.load_view("db.big")
    assert view.sql_for("spark").sql == f"SELECT id FROM {lake}.db.orders WHERE amount > 15"
    assert view.properties["comment"] == "large orders"
    assert view.schema().find_field("id").doc == "order id"

    spark.sql(f"CREATE OR REPLACE VIEW {lake}.db.big AS "
              f"SELECT id, amount FROM {lake}.db.orders WHERE amount > 5")
    assert spark.sql(f"SELECT * FROM {lake}.db.big ORDER BY id") == [[1, 10], [2, 20]]
    replaced = catalog.load_view("db.big")
    assert replaced.uuid() == view.uuid()
    assert [v.version_id for v in replaced.versions] == [1, 2]
    assert replaced.current_version().version_id == 2
    assert len(replaced.metadata.schemas) == 2
    strong = f"{lake}_strong"
    spark.catalog(strong, type="rest", uri=f"{server.url}/iceberg", warehouse="lake@strong")
    assert spark.sql(f"SHOW VIEWS IN {strong}.db") == [["db", "big", False]]
    assert spark.sql(f"SELECT * FROM {strong}.db.big ORDER BY id") == [[1, 10], [2, 20]]
    with pytest.raises(SparkError, match="read-only session"):
        spark.sql(f"DROP VIEW {strong}.db.big")

    # A view and a table never share a name.
    with pytest.raises(SparkError, match="already exists"):
        spark.sql(f"CREATE VIEW {lake}.db.orders AS SELECT 1 AS id")
    with pytest.raises(SparkError, match="already exists"):
        spark.sql(f"CREATE TABLE {lake}.db.big (id bigint) USING iceberg")

    spark.sql(f"ALTER VIEW {lake}.db.big RENAME TO {lake}.db.large")
    assert spark.sql(f"SHOW VIEWS IN {lake}.db") == [["db", "large", False]]
    assert spark.sql(f"SELECT count(*) FROM {lake}.db.large") == [[2]]
    spark.sql(f"DROP VIEW {lake}.db.large")
    assert spark.sql(f"SHOW VIEWS IN {lake}.db") == []
    assert not catalog.view_exists("db.large")
    assert spark.sql(f"SELECT count(*) FROM {lake}.db.orders") == [[2]]


def test_spark_sql_reads_and_writes_a_table_named_beyond_plain_letters(
        spark: SparkDriver, lake: str, catalog: RestCatalog) -> None:
    """A namespace of two levels, ``("sales dept", "eu.west")``, and a table ``commandes été``
    (a space, a dot and a non-ASCII letter), each part quoted in backticks as Spark SQL quotes
    a name: Spark creates them, writes and reads the table; pyiceberg reads what Spark wrote and
    Spark what pyiceberg appends. Iceberg's Java client writes the space of a name in a URL as
    ``+``, which the server reads as a space (``sales+dept`` was a namespace not found)."""
    namespace = f"{lake}.`sales dept`.`eu.west`"
    table = f"{namespace}.`commandes été`"
    spark.sql(f"CREATE NAMESPACE {lake}.`sales dept`")
    spark.sql(f"CREATE NAMESPACE {namespace}")
    spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'été'), (2, 'x')")
    assert spark.sql(f"SHOW NAMESPACES IN {lake}.`sales dept`") == [["`sales dept`.`eu.west`"]]
    assert spark.sql(f"SHOW TABLES IN {namespace}") == [
        ["`sales dept`.`eu.west`", "commandes été", False]]

    identifier = ("sales dept", "eu.west", "commandes été")
    loaded = catalog.load_table(identifier)
    assert sorted(loaded.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "été"}, {"id": 2, "v": "x"}]
    loaded.append(pa.table({"id": [3], "v": ["août"]}, schema=loaded.schema().as_arrow()))
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT id, v FROM {table} ORDER BY id") == [
        [1, "été"], [2, "x"], [3, "août"]]
