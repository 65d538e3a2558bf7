"""The ``metaservice`` streaming source and sink, and batch reads through the format, on the
real server and a real local Spark, in-process."""

from __future__ import annotations

import pytest

import spark_plugin as sp
from spark_plugin import _iceberg as ice
from spark_plugin._iceberg.catalogs import spark_conf
from spark_plugin._spark_io import scoped_spark_conf
from spark_plugin.streaming import register_data_source
from tests.spark_plugin.streaming_support import ingest, wait_until

pytestmark = pytest.mark.spark


@pytest.fixture
def fmt(spark, live_server_url):
    register_data_source(spark, url=live_server_url)
    return live_server_url


# the two streaming sources: Python's (files read in Python workers) and the JVM one, whose
# micro-batches are Spark's own Parquet scans of the barrier's files
SOURCE_FORMATS = ["metaservice", "metaservice_native"]


def make_tables(spark, catalog, database, ddl: str, *names: str) -> list[str]:
    schema = spark.createDataFrame([], ddl).schema
    out = []
    for n in names:
        sp.create_table_from_spark_schema(f"lake.{database}.{n}", schema, catalog=catalog)
        out.append(f"lake.{database}.{n}")
    return out


def source(spark, url: str, job: str, table: str, source_format: str = "metaservice",
           **options: str):
    reader = (spark.readStream.format(source_format).option("metaservice.url", url)
              .option("job", job).option("table", table))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def sink(df, url: str, job: str, table: str, checkpoint, mode: str = "append", trigger=None):
    writer = (df.writeStream.format("metaservice").option("metaservice.url", url)
              .option("job", job).option("table", table).outputMode(mode)
              .option("checkpointLocation", str(checkpoint)))
    if trigger is not None:
        writer = writer.trigger(**trigger)
    return writer.start()


def latest(client, table):
    try:
        return client.table_barriers(table, limit=1).get("latest_barrier")
    except sp.UnknownTableError:
        return None


def rows_of(catalog, table, snapshot_id=None):
    data = ice.load_table(table, catalog).scan(snapshot_id=snapshot_id).to_arrow()
    return sorted(tuple(r.values()) for r in data.to_pylist())


def wait_for_barrier(client, query, table, barrier, timeout=120):
    def reached():
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        return latest(client, table) == barrier
    wait_until(reached, timeout=timeout)


@pytest.mark.parametrize("source_format", SOURCE_FORMATS)
def test_append_query_commits_each_barrier_once_and_the_job_follows_the_query(
        spark, catalog, database, client, fmt, tmp_path, source_format):
    orders, out = make_tables(spark, catalog, database, "id long, amount long",
                              "orders", "doubled")
    job = f"{database}.double"
    ingest(client, catalog, orders, {"id": [1, 2], "amount": [10, 20]}, barrier=1_000)
    df = source(spark, fmt, job, orders, source_format).selectExpr("id", "amount * 2 AS amount")
    assert client.get_job(job)["state"] == "planned"  # registered when the stream was defined
    query = sink(df, fmt, job, out, tmp_path / "ckpt")
    try:
        wait_for_barrier(client, query, out, 1_000)
        assert client.get_job(job)["state"] == "running"
        ingest(client, catalog, orders, {"id": [3], "amount": [30]}, barrier=2_000)
        wait_for_barrier(client, query, out, 2_000)
        assert rows_of(catalog, out) == [(1, 20), (2, 40), (3, 60)]
        table = ice.load_table(out, catalog)
        assert [(j, b) for _, j, b in ice.tagged_snapshots(table.metadata)] == [
            (job, 1_000), (job, 2_000)]
        summary = table.metadata.current_snapshot().summary
        assert summary["metaservice.spark.batch-id"].isdigit()
        assert table.metadata.properties[f"metaservice.sink.{job}.last-barrier"] == "2000"
    finally:
        query.stop()
    wait_until(lambda: client.get_job(job)["state"] == "terminated", timeout=30)


@pytest.mark.parametrize("source_format", SOURCE_FORMATS)
def test_sources_of_one_job_read_the_same_barrier(spark, catalog, database, client, fmt,
                                                  tmp_path, source_format):
    orders, = make_tables(spark, catalog, database, "order_id long, customer_id long", "orders")
    customers, = make_tables(spark, catalog, database, "customer_id long, segment string",
                             "customers")
    enriched, = make_tables(spark, catalog, database,
                            "order_id long, customer_id long, segment string", "enriched")
    job = f"{database}.enrich"
    ingest(client, catalog, customers, {"customer_id": [1, 2], "segment": ["a", "b"]}, 1_000)
    ingest(client, catalog, orders, {"order_id": [10, 11], "customer_id": [1, 2]}, 1_000)
    joined = (source(spark, fmt, job, orders, source_format)
              .join(source(spark, fmt, job, customers, source_format), "customer_id")
              .select("order_id", "customer_id", "segment"))
    query = sink(joined, fmt, job, enriched, tmp_path / "ckpt")
    try:
        wait_for_barrier(client, query, enriched, 1_000)
        # a new customer and its orders at barrier 2000; barrier 1500 only on orders' side
        ingest(client, catalog, orders, {"order_id": [12], "customer_id": [2]}, 1_500)
        ingest(client, catalog, customers, {"customer_id": [3], "segment": ["c"]}, 2_000)
        ingest(client, catalog, orders, {"order_id": [13], "customer_id": [3]}, 2_000)
        wait_for_barrier(client, query, enriched, 2_000)
        for entry in client.table_barriers(enriched)["barriers"]:
            got = rows_of(catalog, enriched, entry["snapshot_id"])
            n_orders = len(rows_of(catalog, orders, _snap(client, orders, entry["barrier"])))
            assert len(got) == n_orders, entry
        assert rows_of(catalog, enriched) == [(10, 1, "a"), (11, 2, "b"), (12, 2, "b"),
                                              (13, 3, "c")]
        progress = client.request("GET", f"/jobs/{job}/progress", idempotent=True)["progress"]
        for record in progress:
            if record["state"] == "committed":
                assert set(record["snapshots"]) == {orders, customers}
    finally:
        query.stop()


def _snap(client, table, barrier):
    """snap(table, barrier) from the service's history."""
    for entry in client.table_barriers(table)["barriers"]:
        if entry["barrier"] <= barrier:
            return entry["snapshot_id"]
    raise AssertionError(f"no snapshot of {table} at {barrier}")


def test_complete_mode_overwrites_and_an_idle_barrier_is_a_heartbeat(
        spark, catalog, database, client, fmt, tmp_path):
    orders, = make_tables(spark, catalog, database, "id long, segment string, amount long",
                          "orders")
    totals, = make_tables(spark, catalog, database, "segment string, n long, revenue long",
                          "totals")
    job = f"{database}.totals"
    first = ingest(client, catalog, orders, {"id": [1, 2], "segment": ["a", "b"],
                                             "amount": [5, 7]}, 1_000)
    df = (source(spark, fmt, job, orders).groupBy("segment")
          .agg({"*": "count", "amount": "sum"})
          .selectExpr("segment", "`count(1)` AS n", "`sum(amount)` AS revenue"))
    query = sink(df, fmt, job, totals, tmp_path / "ckpt", mode="complete")
    try:
        wait_for_barrier(client, query, totals, 1_000)
        ingest(client, catalog, orders, {"id": [3], "segment": ["a"], "amount": [1]}, 2_000)
        wait_for_barrier(client, query, totals, 2_000)
        assert rows_of(catalog, totals) == [("a", 2, 6), ("b", 1, 7)]
        at_2000 = ice.load_table(totals, catalog).metadata.current_snapshot()
        assert at_2000.summary.operation.value == "overwrite"
        # the root reports "nothing new up to 3000": the job passes it on, no new snapshot
        client.report_root_barrier(orders, _snap(client, orders, 2_000), 3_000)
        wait_for_barrier(client, query, totals, 3_000)
        history = client.table_barriers(totals)["barriers"]
        assert history[0]["barrier"] == 3_000
        assert history[0]["snapshot_id"] == history[1]["snapshot_id"] == at_2000.snapshot_id
        assert ice.load_table(totals, catalog).metadata.current_snapshot().snapshot_id == \
            at_2000.snapshot_id
        assert first != at_2000.snapshot_id
    finally:
        query.stop()


@pytest.mark.parametrize("source_format", SOURCE_FORMATS)
def test_available_now_stops_at_the_barrier_offered_when_it_started(
        spark, catalog, database, client, fmt, tmp_path, source_format):
    events, out = make_tables(spark, catalog, database, "id long", "events", "copy")
    job = f"{database}.copy"
    for i, barrier in enumerate((1_000, 2_000, 3_000)):
        ingest(client, catalog, events, {"id": [i]}, barrier)
    query = sink(source(spark, fmt, job, events, source_format), fmt, job, out,
                 tmp_path / "ckpt", trigger={"availableNow": True})
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert latest(client, out) == 3_000
    assert rows_of(catalog, out) == [(0,), (1,), (2,)]
    wait_until(lambda: client.get_job(job)["state"] == "terminated", timeout=30)
    # a later run of the same query resumes from its checkpoint: only the new barrier
    ingest(client, catalog, events, {"id": [3]}, 4_000)
    query = sink(source(spark, fmt, job, events, source_format), fmt, job, out,
                 tmp_path / "ckpt", trigger={"availableNow": True})
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert rows_of(catalog, out) == [(0,), (1,), (2,), (3,)]
    assert [b for _, _, b in ice.tagged_snapshots(ice.load_table(out, catalog).metadata)] == [
        3_000, 4_000]


def test_update_mode_is_refused(spark, catalog, database, client, fmt, tmp_path):
    events, out = make_tables(spark, catalog, database, "id long", "events", "counts")
    job = f"{database}.counts"
    ingest(client, catalog, events, {"id": [1]}, 1_000)
    df = source(spark, fmt, job, events).groupBy("id").count()
    query = sink(df, fmt, job, out, tmp_path / "ckpt", mode="update")
    with pytest.raises(Exception, match="metaservice does not support Update mode"):
        query.awaitTermination(120)


def test_sink_without_checkpoint_option_is_refused_with_the_reason(
        spark, catalog, database, client, fmt, tmp_path):
    events, out = make_tables(spark, catalog, database, "id long", "events", "out")
    job = f"{database}.nockpt"
    ingest(client, catalog, events, {"id": [1]}, 1_000)
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "default"))
    try:
        query = (source(spark, fmt, job, events).writeStream.format("metaservice")
                 .option("metaservice.url", fmt).option("job", job).option("table", out).start())
        with pytest.raises(Exception, match=r"needs \.option\('checkpointLocation'"):
            query.awaitTermination(120)
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")


def test_batch_read_reads_the_strong_version(spark, catalog, database, client, fmt):
    events, = make_tables(spark, catalog, database, "id long", "events")
    first = ingest(client, catalog, events, {"id": [1, 2]}, 1_000)
    df = (spark.read.format("metaservice").option("metaservice.url", fmt)
          .option("table", events).option("consistency", "strong").load())
    ingest(client, catalog, events, {"id": [3]}, 2_000)
    # the version is fixed when the DataFrame is defined: a reproducible read
    assert sorted(r.id for r in df.collect()) == [1, 2]
    assert client.get_version(events, "strong").snapshot_id != first
    again = (spark.read.format("metaservice").option("metaservice.url", fmt)
             .option("table", events).load())
    assert sorted(r.id for r in again.collect()) == [1, 2, 3]
    exact = (spark.read.format("metaservice").option("metaservice.url", fmt)
             .option("table", events).option("barrier", "1000").option("leaseSeconds", "0")
             .load())
    assert sorted(r.id for r in exact.collect()) == [1, 2]


def _three_files(spark, catalog, database, client) -> str:
    events, = make_tables(spark, catalog, database, "id long, name string", "events")
    for k in range(3):
        ingest(client, catalog, events, {"id": [10 * k, 10 * k + 1],
                                         "name": [f"{'abc'[k]}0", f"{'abc'[k]}1"]}, 1_000 * (k + 1))
    return events


def test_a_batch_read_s_pushed_filters_prune_its_files(spark, catalog, database, client,
                                                      live_server_url):
    """Where Spark keeps a pushdown with its scan, the filters it pushes prune the files planned
    (one Spark partition for one file, two for three); the answer is Spark's
    (tests/spark_plugin/test_batch_read_pushdown.py has the property). This Spark (4.2.0) shares
    a pushdown among a DataFrame's queries, so each query here reads a DataFrame of its own."""
    from spark_plugin.streaming.datasource import with_catalog_conf
    from spark_plugin.streaming.pushdown import PUSHDOWN_CONF

    events = _three_files(spark, catalog, database, client)
    register_data_source(spark, url=live_server_url)
    spark.dataSource.register(with_catalog_conf(spark_conf(spark), prunes_by_filters=True))

    def load():
        return (spark.read.format("metaservice").option("metaservice.url", live_server_url)
                .option("table", events).load())
    try:
        with scoped_spark_conf(spark, {PUSHDOWN_CONF: "true"}):
            assert load().rdd.getNumPartitions() == 2
            one = load().filter("id > 15 and name like 'c%'")  # (strings prune no file)
            assert one.rdd.getNumPartitions() == 1
            assert sorted(tuple(r) for r in one.collect()) == [(20, "c0"), (21, "c1")]
            assert sorted(r.id for r in load().filter("name like '%1' or id = 0").collect()) \
                == [0, 1, 11, 21]
    finally:
        register_data_source(spark, url=live_server_url)


def test_a_batch_read_on_a_spark_that_shares_pushdowns_prunes_nothing(spark, catalog, database,
                                                                       client, fmt):
    """Spark 4.2.0 keeps a pushed reader with the DataFrame, for its later queries too: were the
    filters of the first query here pruned by, the second would answer [11]."""
    from spark_plugin.streaming.pushdown import PUSHDOWN_CONF, pushdown_is_scoped_to_its_scan

    assert not pushdown_is_scoped_to_its_scan(spark)
    events = _three_files(spark, catalog, database, client)
    df = (spark.read.format("metaservice").option("metaservice.url", fmt)
          .option("table", events).load())
    with scoped_spark_conf(spark, {PUSHDOWN_CONF: "true"}):
        assert [tuple(r) for r in df.filter("id > 10 and name like 'b%'").collect()] == \
            [(11, "b1")]
        assert sorted(r.id for r in df.filter("name like '%1' or id = 0").collect()) == \
            [0, 1, 11, 21]
        assert df.count() == 6


def test_a_query_without_metaservice_sources_runs_a_job_without_sources(
        spark, catalog, database, client, fmt, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out, = make_tables(spark, catalog, database, "id long", "ingested")
    job = f"{database}.ingest"
    files = tmp_path / "in"
    files.mkdir()
    for i in range(2):
        pq.write_table(pa.table({"id": pa.array([10 * i + k for k in range(3)], pa.int64())}),
                       files / f"part-{i}.parquet")
    df = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(str(files))
    query = sink(df, fmt, job, out, tmp_path / "ckpt", trigger={"availableNow": True})
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert rows_of(catalog, out) == [(0,), (1,), (2,), (10,), (11,), (12,)]
    recorded = client.table_barriers(out)["barriers"]
    assert len(recorded) == 2 and recorded[0]["barrier"] > recorded[1]["barrier"]
    table = ice.load_table(out, catalog)
    batches = [table.metadata.snapshot_by_id(s).summary["metaservice.spark.batch-id"]
               for s, _, _ in ice.tagged_snapshots(table.metadata)]
    assert batches == ["0", "1"]
    # the sink recorded the query's job: the listener unregisters it although no source names it
    wait_until(lambda: client.get_job(job)["state"] == "terminated", timeout=30)


@pytest.mark.parametrize("source_format", SOURCE_FORMATS)
def test_starting_barrier_sets_the_first_full_read_and_available_now_reads_all_available(
        spark, catalog, database, client, fmt, tmp_path, source_format):
    events, out = make_tables(spark, catalog, database, "id long", "events", "copy")
    job = f"{database}.from2000"
    for i, barrier in enumerate((1_000, 2_000, 3_000)):
        ingest(client, catalog, events, {"id": [i]}, barrier)
    df = source(spark, fmt, job, events, source_format, startingBarrier="2000")
    query = sink(df, fmt, job, out, tmp_path / "ckpt", trigger={"availableNow": True})
    assert query.awaitTermination(180)
    assert query.exception() is None
    # the start position is a full read at 2000 (rows of 1000 and 2000), then 3000
    recorded = client.table_barriers(out)["barriers"]
    assert [r["barrier"] for r in recorded] == [3_000, 2_000]
    assert rows_of(catalog, out, recorded[1]["snapshot_id"]) == [(0,), (1,)]
    assert rows_of(catalog, out) == [(0,), (1,), (2,)]


def _executed_plan(query) -> str:
    return str(query._jsq.streamingQuery().lastExecution().executedPlan().toString())


def test_native_source_scans_with_spark_and_matches_columns_by_field_id(
        spark, catalog, database, client, fmt, tmp_path):
    events, out = make_tables(spark, catalog, database, "id long, amount long", "events", "copy")
    job = f"{database}.native"
    ingest(client, catalog, events, {"id": [1], "amount": [10]}, 1_000)
    # renamed after its first files were written: those files still say "amount"
    with ice.load_table(events, catalog).update_schema() as update:
        update.rename_column("amount", "value")
    ingest(client, catalog, events, {"id": [2], "value": [20]}, 2_000)
    df = (source(spark, fmt, job, events, "metaservice_native").where("value > 0")
          .selectExpr("id", "value AS amount"))
    query = sink(df, fmt, job, out, tmp_path / "ckpt", trigger={"availableNow": True})
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert rows_of(catalog, out) == [(1, 10), (2, 20)]
    plan = _executed_plan(query)
    assert "FileScan parquet" in plan and "PushedFilters: [IsNotNull(value), " \
        "GreaterThan(value,0)]" in plan, plan
    assert query.lastProgress["sources"][0]["description"].startswith("metaservice_native[")


def test_native_source_reads_in_tasks_what_spark_cannot_read_as_is(
        spark, catalog, database, client, fmt, tmp_path):
    from pyiceberg.types import LongType

    events, out = make_tables(spark, catalog, database, "id long, amount int", "events", "copy")
    job = f"{database}.promoted"
    ingest(client, catalog, events, {"id": [1], "amount": [10]}, 1_000)
    with ice.load_table(events, catalog).update_schema() as update:
        update.update_column("amount", LongType())  # int files read as long: pyiceberg's work
    ingest(client, catalog, events, {"id": [2], "amount": [2**40]}, 2_000)
    with ice.load_table(out, catalog).update_schema() as update:
        update.update_column("amount", LongType())
    query = sink(source(spark, fmt, job, events, "metaservice_native"), fmt, job, out,
                 tmp_path / "ckpt", trigger={"availableNow": True})
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert rows_of(catalog, out) == [(1, 10), (2, 2**40)]
    # the micro-batch's rows came from the Python tasks' RDD, not from Spark's file scan
    plan = _executed_plan(query)
    assert "Scan ExistingRDD" in plan and "FileScan" not in plan, plan


def test_native_source_without_registration_says_what_to_call(spark, tmp_path):
    from spark_plugin.streaming import native_source

    jvm = spark.sparkContext._jvm
    provider = jvm.io.metaservice.spark.NativeBarrierSourceProvider
    registered = native_source._registered.get(id(spark.sparkContext._gateway))
    provider.register(None)
    try:
        with pytest.raises(Exception, match=r"call spark_plugin.register_data_source\(spark\)"):
            spark.readStream.format("metaservice_native").option("job", "j").load()
    finally:
        provider.register(registered)


def test_native_source_reads_a_partitioned_table_with_spark_scan(
        spark, catalog, database, client, fmt, tmp_path):
    """The files sit in partition directories (``region=eu/...``) and store the partition
    column: Spark scans them as named, and takes no column from a directory's name."""
    schema = spark.createDataFrame([], "id long, region string").schema
    events = f"lake.{database}.events"
    sp.create_table_from_spark_schema(events, schema, catalog=catalog, partition_by=["region"])
    out, = make_tables(spark, catalog, database, "id long, region string", "copy")
    job = f"{database}.partitioned"
    ingest(client, catalog, events, {"id": [1, 2], "region": ["eu", "us"]}, 1_000)
    ingest(client, catalog, events, {"id": [3], "region": ["eu"]}, 2_000)
    assert all("region=" in t.file.file_path for t in
               ice.load_table(events, catalog).scan().plan_files())
    query = sink(source(spark, fmt, job, events, "metaservice_native"), fmt, job, out,
                 tmp_path / "ckpt", trigger={"availableNow": True})
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert rows_of(catalog, out) == [(1, "eu"), (2, "us"), (3, "eu")]
    assert "FileScan parquet" in _executed_plan(query)
