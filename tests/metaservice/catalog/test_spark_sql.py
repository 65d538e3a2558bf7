"""Spark SQL on the catalog from Spark 4: pyspark 4.1.1 with Apache Iceberg's own Spark 4.1
runtime (``tests/engines/spark41``, set up by ``engines/spark41/install.sh``), over loopback, on
PostgreSQL (Spark adds the engine, not the store: the catalog's database work is tried on both
backends by the pyiceberg and race tests).

The SQL runs on a real cluster: a standalone master and two workers of that same Spark (one
core each), the driver in a process of its own at ``spark://…``; Iceberg's runtime reaches the
executors as the session's ``spark.jars``, and the executors write the tables' data files into
the warehouse the catalog names. One cluster and one driver serve the module.

A job's SQL writes (``INSERT INTO``, ``MERGE INTO``, ``UPDATE``, ``DELETE``, on copy-on-write and
merge-on-read tables) carry its barrier through Iceberg's session snapshot properties
(``SET spark.sql.iceberg.snapshot-property.metaservice.barrier = …`` and ``….metaservice.job``)
and complete that barrier in the commit itself; without them the catalog refuses the write
into a running job's sink. A strong read session (``warehouse=lake@strong``) joins a running
pipeline's tables at one barrier; ``CALL …system.expire_snapshots`` never removes a protected
snapshot, and ``CALL …system.rollback_to_snapshot`` moves a table back only under an applied
rollback plan.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog

from metaservice.clock import ManualClock
from metaservice_soak.spark_cluster import StandaloneCluster
from tests.conftest import ServerThread
from tests.engines.spark35.rig import SparkDriver, SparkError
from tests.engines.spark41.rig import spark41_driver
from tests.metaservice.catalog.pipeline import (
    strong_sessions_hold_while_the_head_mixes,
)
from tests.metaservice.catalog.test_pyiceberg import barriers
from tests.metaservice.jobs.test_jobs import plan

pytestmark = [pytest.mark.spark_jvm, pytest.mark.backends("postgresql")]

COLUMNS = "id long, amount long"
PROPERTY = "spark.sql.iceberg.snapshot-property"


@pytest.fixture(scope="module")
def spark(spark41_cluster: StandaloneCluster,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkDriver]:
    """The module's driver on the module's cluster; its application holds both workers'
    cores."""
    driver = spark41_driver(tmp_path_factory.mktemp("spark41") / "driver.log",
                            master=spark41_cluster.master_url)
    yield driver
    driver.close()


@pytest.fixture
def lake(spark: SparkDriver, server: ServerThread) -> str:
    return spark.head_catalog(server.url)


def as_job(spark: SparkDriver, job: str | None, barrier: int | None) -> None:
    """The session's snapshot properties: every write of the session carries them (a write
    option of the same name overrides them)."""
    for key, value in (("metaservice.job", job), ("metaservice.barrier", barrier)):
        if value is None:
            spark.sql(f"RESET `{PROPERTY}.{key}`")
        else:
            spark.sql(f"SET `{PROPERTY}.{key}`={value}")


def snapshot_ids(spark: SparkDriver, table: str) -> list[int]:
    return [r[0] for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots "
                                     "ORDER BY committed_at")]


MODES = {"cow": "copy-on-write", "mor": "merge-on-read"}
ROW_LEVEL_ID_2 = "cast(id AS string) RLIKE '^2$'"
"""``id = 2`` as a condition Iceberg cannot decide on a data file's column statistics: a
DELETE on it rewrites rows (copy-on-write) or writes delete files (merge-on-read), never drops
whole files."""


def test_the_sql_runs_on_the_clusters_executors(
        spark: SparkDriver, lake: str, spark41_cluster: StandaloneCluster) -> None:
    """The driver's master is the cluster's; the master lists its application holding both
    workers' cores; an INSERT and a SELECT through the catalog run their tasks on the two
    executors (the driver runs none)."""
    spark.sql(f"CREATE NAMESPACE {lake}.db")
    spark.sql(f"CREATE TABLE {lake}.db.spread (id bigint) USING iceberg")
    before = {e["id"]: e["tasks"] for e in spark.executors()["executors"]}
    spark.sql(f"INSERT INTO {lake}.db.spread SELECT id FROM range(0, 100, 1, 4)")
    assert spark.sql(f"SELECT count(*), sum(id) FROM {lake}.db.spread") == [[100, 4950]]

    seen = spark.executors()
    assert seen["master"] == spark41_cluster.master_url
    ran = {e["id"]: e["tasks"] - before.get(e["id"], 0) for e in seen["executors"]}
    assert ran.pop("driver") == 0, seen
    assert len(ran) == 2 and all(tasks > 0 for tasks in ran.values()), seen
    assert all(e["host_port"].startswith("127.0.0.1:") for e in seen["executors"])
    status = spark41_cluster.status()
    [application] = [a for a in status["activeapps"] if a["name"] == "metaservice-catalog-tests"]
    assert application["cores"] == 2, application
    assert sorted(w["coresused"] for w in status["workers"]) == [1, 1], status["workers"]


def test_a_jobs_sql_writes_complete_its_barriers_in_both_row_level_modes(
        spark: SparkDriver, lake: str, client: httpx.Client) -> None:
    spark.sql(f"CREATE NAMESPACE {lake}.db")
    spark.sql(f"CREATE TABLE {lake}.db.orders (id bigint, amount bigint) USING iceberg")
    for short, mode in MODES.items():
        spark.sql(f"CREATE TABLE {lake}.db.totals_{short} (id bigint, amount bigint) USING iceberg "
                  f"TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='{mode}', "
                  f"'write.update.mode'='{mode}', 'write.merge.mode'='{mode}')")
    sinks = [f"lake.db.totals_{short}" for short in MODES]
    plan(client, "enrich", ["lake.db.orders"], sinks)

    def ingest(rows: list[tuple[int, int]], barrier: int) -> int:
        as_job(spark, None, barrier)  # a root append completes the barrier it carries
        spark.append(f"{lake}.db.orders", COLUMNS, rows)
        return snapshot_ids(spark, f"{lake}.db.orders")[-1]

    # Each barrier's step is one kind of SQL write, into both sinks.
    steps = [
        "INSERT INTO {t} SELECT id, amount FROM {orders}",
        "MERGE INTO {t} t USING (SELECT id, amount FROM {orders}) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET t.amount = s.amount WHEN NOT MATCHED THEN INSERT *",
        "UPDATE {t} SET amount = amount + 1 WHERE id = 1",
        # Row-level whatever the files hold: see the next test for a DELETE of whole files.
        "DELETE FROM {t} WHERE " + ROW_LEVEL_ID_2,
    ]
    answer = None
    for number, step in enumerate(steps, start=1):
        barrier = 100 * number
        orders = ingest([(number, 10 * number)], barrier)
        answer = (client.post("/jobs/enrich/start", json={"from": "latest"}).json()
                  if answer is None else
                  client.post("/jobs/enrich/barriers/next",
                              json={"after": answer["barrier"]}).json())
        assert answer["barrier"] == barrier and answer["snapshots"] == {"lake.db.orders": orders}
        as_job(spark, "enrich", barrier)
        for short in MODES:
            spark.sql(step.format(t=f"{lake}.db.totals_{short}",
                                  orders=f"{lake}.db.orders VERSION AS OF {orders}"))
            head = snapshot_ids(spark, f"{lake}.db.totals_{short}")[-1]
            assert barriers(client, f"lake.db.totals_{short}")[0] == (barrier, head, "enrich")
    as_job(spark, None, None)
    for short in MODES:
        # 100 inserts order 1, 200 merges orders 1 and 2, 300 updates 1, 400 deletes 2
        assert spark.sql(f"SELECT * FROM {lake}.db.totals_{short} ORDER BY id") == [[1, 11]]
    # merge-on-read wrote delete files, copy-on-write rewrote data files
    [[deletes]] = spark.sql(f"SELECT count(*) FROM {lake}.db.totals_mor.delete_files")
    assert deletes > 0
    [[deletes]] = spark.sql(f"SELECT count(*) FROM {lake}.db.totals_cow.delete_files")
    assert deletes == 0
    progress = client.get("/jobs/enrich").json()
    assert progress["last_committed_barrier"] == 400, progress

    # Without the job's barrier, a write into the running job's sink is refused, and the
    # message says what to set.
    with pytest.raises(SparkError, match="metaservice table_has_writer") as refused:
        spark.sql(f"INSERT INTO {lake}.db.totals_cow VALUES (9, 9)")
    assert "`spark.sql.iceberg.snapshot-property.metaservice.barrier`=<barrier>" in (
        refused.value.message)
    assert len(snapshot_ids(spark, f"{lake}.db.totals_cow")) == 4


def test_a_dataframe_jobs_overwrite_of_partitions_completes_its_barrier(
        spark: SparkDriver, lake: str, client: httpx.Client) -> None:
    """``writeTo(...).overwritePartitions()`` with the barrier in its write options (a write
    option overrides a session property of the same name)."""
    spark.sql(f"CREATE NAMESPACE {lake}.db")
    spark.sql(f"CREATE TABLE {lake}.db.events (day string, amount long) USING iceberg")
    spark.sql(f"CREATE TABLE {lake}.db.daily (day string, amount long) USING iceberg "
              "PARTITIONED BY (day)")
    plan(client, "daily", ["lake.db.events"], ["lake.db.daily"])
    as_job(spark, None, 100)
    spark.append(f"{lake}.db.events", "day string, amount long", [("mon", 1), ("tue", 2)])
    answer = client.post("/jobs/daily/start", json={"from": "latest"}).json()
    assert answer["barrier"] == 100
    as_job(spark, "daily", 1)  # the write option's barrier wins over the session's
    spark.overwrite_partitions(f"{lake}.db.daily", "day string, amount long",
                               [("mon", 1), ("tue", 2)],
                               **{"snapshot-property.metaservice.barrier": "100"})
    [first] = snapshot_ids(spark, f"{lake}.db.daily")
    assert barriers(client, "lake.db.daily") == [(100, first, "daily")]

    as_job(spark, None, 200)
    spark.append(f"{lake}.db.events", "day string, amount long", [("tue", 3)])
    answer = client.post("/jobs/daily/barriers/next", json={"after": 100}).json()
    assert answer["barrier"] == 200
    as_job(spark, "daily", 200)
    spark.overwrite_partitions(f"{lake}.db.daily", "day string, amount long", [("tue", 5)])
    as_job(spark, None, None)
    second = snapshot_ids(spark, f"{lake}.db.daily")[-1]
    assert barriers(client, "lake.db.daily") == [(200, second, "daily"), (100, first, "daily")]
    assert spark.sql(f"SELECT * FROM {lake}.db.daily ORDER BY day") == [["mon", 1], ["tue", 5]]


def test_a_delete_of_whole_data_files_carries_no_session_properties_and_is_refused(
        spark: SparkDriver, lake: str, client: httpx.Client) -> None:
    """Iceberg 1.12's Spark runtime commits a DELETE whose condition covers whole data files
    (decided on the files' column statistics) as a metadata-only delete that leaves out the
    session's snapshot properties: in a running job's sink the catalog refuses it as a write
    without the job's barrier. The same DELETE made row-level (a condition the statistics
    cannot decide) carries them and completes the barrier."""
    spark.sql(f"CREATE NAMESPACE {lake}.db")
    spark.sql(f"CREATE TABLE {lake}.db.src (id bigint, amount bigint) USING iceberg")
    spark.sql(f"CREATE TABLE {lake}.db.out (id bigint, amount bigint) USING iceberg")
    plan(client, "copy", ["lake.db.src"], ["lake.db.out"])
    as_job(spark, None, 100)
    spark.append(f"{lake}.db.src", COLUMNS, [(1, 10)])
    as_job(spark, None, 200)
    spark.append(f"{lake}.db.src", COLUMNS, [(2, 20)])
    answer = client.post("/jobs/copy/start", json={"from": "earliest"}).json()
    assert answer["barrier"] == 100, answer
    as_job(spark, "copy", 100)
    spark.sql(f"INSERT INTO {lake}.db.out VALUES (1, 10)")
    answer = client.post("/jobs/copy/barriers/next", json={"after": 100}).json()
    assert answer["barrier"] == 200, answer
    as_job(spark, "copy", 200)
    spark.sql(f"INSERT INTO {lake}.db.out VALUES (2, 20)")  # a file of its own: id 2 alone
    [[files]] = spark.sql(f"SELECT count(*) FROM {lake}.db.out.files")
    assert files == 2
    as_job(spark, None, 300)
    spark.append(f"{lake}.db.src", COLUMNS, [(3, 30)])
    answer = client.post("/jobs/copy/barriers/next", json={"after": 200}).json()
    assert answer["barrier"] == 300, answer
    as_job(spark, "copy", 300)  # the step of barrier 300 deletes id 2

    with pytest.raises(SparkError, match="metaservice table_has_writer"):
        spark.sql(f"DELETE FROM {lake}.db.out WHERE id = 2")
    assert spark.sql(f"SELECT id FROM {lake}.db.out ORDER BY id") == [[1], [2]]
    spark.sql(f"DELETE FROM {lake}.db.out WHERE {ROW_LEVEL_ID_2}")
    as_job(spark, None, None)
    assert spark.sql(f"SELECT id FROM {lake}.db.out ORDER BY id") == [[1]]
    head = snapshot_ids(spark, f"{lake}.db.out")[-1]
    assert barriers(client, "lake.db.out")[0] == (300, head, "copy")


def test_a_strong_read_session_joins_a_running_pipeline_at_one_barrier(
        spark: SparkDriver, lake: str, catalog: RestCatalog, client: httpx.Client,
        clock: ManualClock, server: ServerThread) -> None:
    """While a writer commits newer barriers, each strong read session's join sees one
    barrier's cut (no order missing from a sibling's table), where the head mixes barriers."""
    strong_sessions_hold_while_the_head_mixes(spark, lake, catalog, client, clock, server.url,
                                              rounds=4)


def test_expire_snapshots_never_removes_a_leased_or_cut_snapshot(
        spark: SparkDriver, lake: str, client: httpx.Client) -> None:
    """``CALL <catalog>.system.expire_snapshots``: a snapshot at the component's strong cut
    and a leased one stay (the catalog refuses the commit, naming why); unprotected ones go,
    and so does the leased one once its lease is released."""
    spark.sql(f"CREATE NAMESPACE {lake}.db")
    spark.sql(f"CREATE TABLE {lake}.db.orders (id bigint, amount bigint) USING iceberg")
    spark.sql(f"CREATE TABLE {lake}.db.totals (id bigint, amount bigint) USING iceberg")
    plan(client, "enrich", ["lake.db.orders"], ["lake.db.totals"])
    answer = None
    for barrier in (100, 200):
        as_job(spark, None, barrier)
        spark.append(f"{lake}.db.orders", COLUMNS, [(barrier, barrier)])
        answer = (client.post("/jobs/enrich/start", json={"from": "latest"}).json()
                  if answer is None else
                  client.post("/jobs/enrich/barriers/next", json={"after": 100}).json())
        assert answer["barrier"] == barrier, answer
        as_job(spark, "enrich", barrier)
        spark.sql(f"INSERT INTO {lake}.db.totals VALUES ({barrier}, {barrier})")
    as_job(spark, None, 300)  # orders run ahead of the job: the strong cut stays at 200
    spark.append(f"{lake}.db.orders", COLUMNS, [(300, 300)])
    as_job(spark, None, None)
    orders_100, orders_200, orders_300 = snapshot_ids(spark, f"{lake}.db.orders")
    totals_100, totals_200 = snapshot_ids(spark, f"{lake}.db.totals")

    def expire(table: str, snapshot: int) -> None:
        spark.sql(f"CALL {lake}.system.expire_snapshots(table => 'db.{table}', "
                  f"snapshot_ids => array({snapshot}))")

    with pytest.raises(SparkError, match="metaservice snapshot_protected.*strong_cut"):
        expire("orders", orders_200)
    lease = client.post("/versions", json={"tables": ["lake.db.totals"], "barrier": 100,
                                           "lease_seconds": 300, "holder": "report"}).json()
    with pytest.raises(SparkError, match=f"snapshot_protected.*lease:{lease['lease_id']}"):
        expire("totals", totals_100)
    assert snapshot_ids(spark, f"{lake}.db.orders") == [orders_100, orders_200, orders_300]
    assert snapshot_ids(spark, f"{lake}.db.totals") == [totals_100, totals_200]
    assert spark.sql(f"SELECT id FROM {lake}.db.orders VERSION AS OF {orders_200} "
                     "ORDER BY id") == [[100], [200]]

    expire("orders", orders_100)
    assert snapshot_ids(spark, f"{lake}.db.orders") == [orders_200, orders_300]
    assert client.delete(f"/leases/{lease['lease_id']}").status_code == 204
    expire("totals", totals_100)
    assert snapshot_ids(spark, f"{lake}.db.totals") == [totals_200]
    gone = client.post("/versions", json={"tables": ["lake.db.totals"], "barrier": 100})
    assert (gone.status_code, gone.json()["error"]["code"]) == (410, "snapshot_expired")


def test_rollback_to_snapshot_is_refused_unless_an_applied_rollback_plan_targets_it(
        spark: SparkDriver, lake: str, client: httpx.Client) -> None:
    """``CALL <catalog>.system.rollback_to_snapshot``: the catalog's refusal reaches Spark and
    the head stays; under an applied rollback plan the call moves the head to the plan's
    snapshot, and to no other."""
    spark.sql(f"CREATE NAMESPACE {lake}.db")
    spark.sql(f"CREATE TABLE {lake}.db.r (id bigint, amount bigint) USING iceberg")
    for barrier in (100, 200, 300):
        as_job(spark, None, barrier)
        spark.append(f"{lake}.db.r", COLUMNS, [(barrier, barrier)])
    as_job(spark, None, None)
    first, second, third = snapshot_ids(spark, f"{lake}.db.r")

    def rollback(snapshot: int) -> None:
        spark.sql(f"CALL {lake}.system.rollback_to_snapshot('db.r', {snapshot})")

    def head() -> int:
        [[current]] = spark.sql(f"SELECT snapshot_id FROM {lake}.db.r.history "
                                "WHERE is_current_ancestor ORDER BY made_current_at DESC LIMIT 1")
        return int(current)

    with pytest.raises(SparkError, match="metaservice rollback_plan_not_applied"):
        rollback(first)
    assert head() == third
    plan_id = client.post("/rollback-plans",
                          json={"table": "lake.db.r", "barrier": 100}).json()["id"]
    with pytest.raises(SparkError, match="metaservice rollback_plan_not_applied"):
        rollback(first)  # planned, not applied
    assert client.post(f"/rollback-plans/{plan_id}/apply").status_code == 200
    with pytest.raises(SparkError, match="metaservice rollback_plan_not_applied"):
        rollback(second)  # not the plan's snapshot
    assert head() == third
    rollback(first)
    assert head() == first
    assert client.post(f"/rollback-plans/{plan_id}/complete").status_code == 200
    assert spark.sql(f"SELECT id FROM {lake}.db.r ORDER BY id") == [[100]]
