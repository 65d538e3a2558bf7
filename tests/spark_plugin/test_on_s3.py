"""The plugin with its tables on S3 (a real SeaweedFS serving STS), their credentials vended by
the catalog: no process of Spark's has an AWS variable, any S3 setting or any S3 jar of its own.

A batch job on a standalone cluster (master and two workers, ``test_standalone_cluster.py``'s)
writes and reads its tables in Spark's tasks through pyiceberg's FileIO, opened in the Python
workers with the FileIO properties the driver ships (``spark_plugin/_executor_tables.py``). A
streaming query copies barriers between two tables on S3 through the ``metaservice`` source and
sink (the same FileIO on the executors), in local mode, its checkpoint on the local disk. A long
run of writes and reads leaves no S3 client behind in Spark's JVM.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import spark_plugin as sp
from metaservice_soak.spark_cluster import StandaloneCluster, spark_home
from spark_plugin import _iceberg as ice
from tests.metaservice.catalog.test_vended_credentials import _sts_store
from tests.spark_plugin.parquet_files import (
    FLAT,
    GZIP_LAYOUT,
    NESTED,
    SMALL_LAYOUT,
    parquet_facts,
    rows_of_every_kind,
    spark_writer_options,
)
from tests.spark_plugin.test_standalone_cluster import (
    CATALOG,
    DRIVER,
    TOKEN,
    check_ran_on_the_cluster,
    driver_env,
    ingest,
)

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
AWS_SETTINGS = ("AWS_ACCESS_KEY", "AWS_SECRET", "AWS_SESSION", "AWS_ENDPOINT", "AWS_PROFILE",
                "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_SHARED_CREDENTIALS_FILE",
                "AWS_CONFIG_FILE", "AWS_WEB_IDENTITY", "AWS_ROLE")
"""The variables that would give an S3 client credentials, an endpoint or a region."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with _sts_store(tmp_path_factory.mktemp("plugin-s3")) as s:
        yield s


@pytest.fixture(scope="module")
def warehouse() -> str:
    return f"wh-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory, store: Any,
               warehouse: str) -> Iterator[str]:
    with vending_server(tmp_path_factory.mktemp("s3-server"), store, warehouse) as url:
        yield url


@contextlib.contextmanager
def vending_server(path: Path, store: Any, warehouse: str) -> Iterator[str]:
    """A server whose warehouse is ``s3://lake/<warehouse>``, authentication required, vending
    each table's credentials (STS sessions narrowed to the table's prefix)."""
    from pydantic import SecretStr

    from metaservice.app import create_app
    from metaservice.db.engine import build_engine
    from metaservice.db.migrate import upgrade_to_head
    from metaservice.db.session import Database
    from metaservice_soak.seaweedfs import ROLE_ARN
    from tests.conftest import ServerThread
    from tests.metaservice.catalog.test_s3 import s3_settings

    path.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{path / 'metaservice.db'}"
    database = Database(build_engine(url))
    upgrade_to_head(database.engine)
    settings = s3_settings(url, store, warehouse).model_copy(update={
        "catalog_name": CATALOG, "auth": "required", "admin_token": SecretStr(TOKEN),
        "vended_credentials_role_arn": ROLE_ARN, "vended_credentials_seconds": 900,
        "storage_connect_seconds": 5.0, "storage_request_seconds": 30.0})
    with ServerThread(create_app(settings, database=database)) as server:
        yield server.url
    database.dispose()


@pytest.fixture
def client(server_url: str) -> Iterator[sp.MetaServiceClient]:
    with sp.MetaServiceClient(server_url, token=TOKEN) as c:
        yield c


def bucket_keys(store: Any, prefix: str) -> set[str]:
    """Every object under ``prefix``, listed by the store's admin client (not the plugin's)."""
    client = store.client()
    found: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket,
                                                                  Prefix=prefix):
        found.update(item["Key"] for item in page.get("Contents", [])
                     if not item["Key"].endswith("/"))
    return found


def fresh_database(server_url: str) -> tuple[str, Any]:
    """A new namespace of the built-in catalog, and that catalog (pyiceberg's, the admin's)."""
    database = f"db_{uuid.uuid4().hex[:8]}"
    catalog = ice.find_catalog(CATALOG, conf={}, url=server_url, token=TOKEN).load()
    catalog.create_namespace(database)
    return database, catalog


def current_data_files(client: sp.MetaServiceClient, table: str) -> list[str]:
    return [t.file.file_path for t in ice.load_table(table, client=client).scan().plan_files()]


def secrets_of(client: sp.MetaServiceClient, table: str) -> list[str]:
    """The vended secret and session token of ``table`` for the admin's token: the catalog
    hands the same STS session out again while half its life is left, so these are the
    driver's and the executors' too."""
    props = ice.load_table(table, client=client).io.properties
    secrets = [props["s3.secret-access-key"], props["s3.session-token"]]
    assert all(len(s) >= 16 for s in secrets)
    return secrets


def without_aws(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("AWS_")}


def _batch_job_on_the_cluster(cluster: StandaloneCluster, server_url: str, tmp_path: Path,
                              jars: list[str]) -> tuple[str, dict[str, Any], Any]:
    """The README's batch job submitted to the cluster with the spark-submit options ``jars``
    (no AWS variable anywhere): its tables' prefix, the driver's result and its run."""
    database = f"db_{uuid.uuid4().hex[:8]}"
    prefix = f"{CATALOG}.{database}"
    result_file = tmp_path / "result.json"
    (tmp_path / "driver").mkdir()
    # this checkout's code on the driver and in the executors' Python workers, as pytest
    # imports it here (not another installed copy of the plugin)
    env = {**without_aws(driver_env(server_url)), "PYTHONPATH": str(ROOT)}
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url,
               "--conf", f"spark.pyspark.python={sys.executable}",
               "--conf", f"spark.executorEnv.PYTHONPATH={ROOT}", *jars,
               str(DRIVER), "batch", cluster.master_url, prefix, str(result_file)]
    run = subprocess.run(command, env=env, cwd=tmp_path / "driver", capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[
        run.stderr.rfind("Traceback"):][-6000:]
    result = json.loads(result_file.read_text())
    check_ran_on_the_cluster(result["evidence"], cluster)
    for task in result["evidence"]["tasks"]:
        assert [k for k in task["jvm_env"] + task["python_env"] if k.startswith("AWS_")] == []
    return prefix, result, run


def test_a_batch_job_on_the_cluster_writes_and_reads_its_tables_on_s3(
        cluster: StandaloneCluster, server_url: str, client: sp.MetaServiceClient,
        store: Any, warehouse: str, tmp_path: Path) -> None:
    # the plugin's JVM writer, shipped to the executors by Spark
    prefix, result, run = _batch_job_on_the_cluster(cluster, server_url, tmp_path,
                                                    ["--jars", sp.plugin_jars()])
    database = prefix.split(".")[1]
    evidence = result["evidence"]

    source, sink = f"{prefix}.orders", f"{prefix}.orders_enriched"
    rows = ice.load_table(sink, client=client).scan().to_arrow().sort_by("order_id").to_pylist()
    assert [(r["order_id"], r["vip"]) for r in rows] == [(1, False), (2, True), (3, True),
                                                        (4, True)]
    [step] = result["batch"]["steps"]
    assert [b["barrier"] for b in client.table_barriers(sink)["barriers"]] == [step["barrier"]]

    # the files each table's snapshot names are objects of the bucket, written by the plugin's
    # JVM writer (Spark's Parquet files, named by its tasks under the write's directory) into
    # the table's data location, and nothing else is there ...
    objects = bucket_keys(store, f"{warehouse}/{database}/")
    for table, name in ((source, "orders"), (sink, "orders_enriched")):
        files = current_data_files(client, table)
        assert files, f"{table} has no data file"
        data = f"s3://lake/{warehouse}/{database}/{name}/data/"
        for path in files:
            assert re.fullmatch(rf"{data}ms-[0-9a-f]{{32}}/part-\d{{5}}-\d+-000\.zstd\.parquet",
                                path), path
        assert ({o for o in objects if o.startswith(data.removeprefix("s3://lake/"))}
                == {f.removeprefix("s3://lake/") for f in files})
    # ... in the executors' tasks (the driver runs none on a cluster), and nothing by Spark's
    # own writers (S3A)
    ran = result["plugin_write_tasks"]
    assert ran and set(ran) <= set(evidence["executor_ids"]) and "driver" not in ran
    assert sum(ran.values()) >= 2  # two writes: the root, the step
    assert not any(result["records_written"].values())

    # no secret in the driver's output nor in any log of the cluster's
    secrets = secrets_of(client, source) + secrets_of(client, sink)
    logs = [run.stdout, run.stderr] + [
        p.read_text(errors="replace") for p in cluster.root.rglob("*")
        if p.is_file() and p.suffix != ".jar" and p.stat().st_size < 20_000_000]
    assert len(logs) > 4
    assert not [s for s in secrets if any(s in text for text in logs)]


def test_executors_without_the_aws_sdk_write_through_pyiceberg(
        cluster: StandaloneCluster, server_url: str, client: sp.MetaServiceClient,
        store: Any, warehouse: str, tmp_path: Path) -> None:
    """The AWS SDK on the driver only (its class path), the plugin's jar shipped to the
    executors without it: the JVM writer's tasks fail for the missing SDK, and the plugin
    writes the tables through pyiceberg in the Python workers instead. The job's result is the
    same, and the bucket holds the committed files only."""
    [plugin, bundle] = sp.plugin_jars().split(",")
    prefix, result, run = _batch_job_on_the_cluster(
        cluster, server_url, tmp_path, ["--jars", plugin, "--driver-class-path", bundle])
    assert run.stdout.count("object_store_write_fallback") == 2, run.stdout[-3000:]  # both writes
    sink = f"{prefix}.orders_enriched"
    rows = ice.load_table(sink, client=client).scan().to_arrow().sort_by("order_id").to_pylist()
    assert [(r["order_id"], r["vip"]) for r in rows] == [(1, False), (2, True), (3, True),
                                                        (4, True)]
    database = prefix.split(".")[1]
    objects = bucket_keys(store, f"{warehouse}/{database}/")
    for table, name in ((f"{prefix}.orders", "orders"), (sink, "orders_enriched")):
        files = current_data_files(client, table)
        data = f"s3://lake/{warehouse}/{database}/{name}/data/"
        assert files and not any("/ms-" in f for f in files), files  # pyiceberg's names
        assert ({o for o in objects if o.startswith(data.removeprefix("s3://lake/"))}
                == {f.removeprefix("s3://lake/") for f in files})
    assert not any(result["records_written"].values())


@pytest.mark.parametrize("source_format", ["metaservice", "metaservice_native"])
def test_a_streaming_query_copies_barriers_between_tables_on_s3(
        spark: Any, server_url: str, client: sp.MetaServiceClient, store: Any, warehouse: str,
        tmp_path: Path, source_format: str) -> None:
    """Each barrier of the source once in the sink, across two runs of the query on one
    checkpoint; the sink's files are objects of the bucket. Spark's Python workers inherit this
    process's environment, which must hold no AWS setting. (``metaservice_native`` reads a
    table on S3 in the plugin's Python tasks with the table's vended credentials: Spark's own
    Parquet reader would need S3A.)"""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    assert [k for k in os.environ if k.startswith(AWS_SETTINGS)] == []
    assert not (Path.home() / ".aws").exists()
    database = f"db_{uuid.uuid4().hex[:8]}"
    prefix = f"{CATALOG}.{database}"
    catalog = ice.find_catalog(CATALOG, conf={}, url=server_url, token=TOKEN).load()
    catalog.create_namespace(database)
    schema = Schema(*[NestedField(i + 1, n, LongType(), required=False)
                      for i, n in enumerate(("id", "amount", "batch"))])
    for table in ("events", "events_out"):
        catalog.create_table((database, table), schema=schema)
    source, sink = f"{prefix}.events", f"{prefix}.events_out"
    job = f"{database}.copy"
    first = int(time.time() * 1000) - 60_000
    barriers = [first + 1000 * i for i in range(3)]
    ids = [[10 * i + k for k in range(2 + i % 2)] for i in range(3)]
    sp.register_data_source(spark, url=server_url, token=TOKEN)

    def run_query() -> None:
        query = (spark.readStream.format(source_format).option("job", job)
                 .option("metaservice.url", server_url).option("metaservice.token", TOKEN)
                 .option("table", source).option("startingBarrier", "earliest").load()
                 .selectExpr("id", "amount * 2 + 1 AS amount", "batch")
                 .writeStream.format("metaservice").option("job", job)
                 .option("metaservice.url", server_url).option("metaservice.token", TOKEN)
                 .option("table", sink)
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        finished = query.awaitTermination(300)
        if not finished:
            query.stop()
        assert finished and query.exception() is None, query.exception()

    for i in range(2):
        ingest(client, source, ids[i], i, barriers[i])
    run_query()
    ingest(client, source, ids[2], 2, barriers[2])
    run_query()

    rows = ice.load_table(sink, client=client).scan().to_arrow().to_pylist()
    expected = sorted((x, x * 7 % 100 * 2 + 1, i) for i, group in enumerate(ids) for x in group)
    assert sorted((r["id"], r["amount"], r["batch"]) for r in rows) == expected
    recorded = client.table_barriers(sink)["barriers"]
    assert recorded[0]["barrier"] == barriers[-1]
    assert {b["writer_job"] for b in recorded} == {job}
    assert {b["barrier"] for b in recorded} <= set(barriers)
    objects = bucket_keys(store, f"{warehouse}/{database}/events_out/data/")
    files = current_data_files(client, sink)
    assert files and {p.removeprefix("s3://lake/") for p in files} <= objects


def test_a_held_table_is_loaded_again_before_its_vended_credentials_end(
        server_url: str, client: sp.MetaServiceClient) -> None:
    """A table a job object holds across its steps (``BarrierJob``) is loaded again, with the
    catalog's newest credentials, once less than ``CREDENTIALS_RENEWAL_MARGIN_S`` is left of
    the ones it holds; before that it is kept as it is. (The catalog's own sessions live at
    least 900 s, so the margin is reached by pretending the time is later.)"""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from spark_plugin._iceberg.catalogs import (
        CREDENTIALS_EXPIRE_AT_MS,
        CREDENTIALS_RENEWAL_MARGIN_S,
    )

    database, catalog = fresh_database(server_url)
    catalog.create_table((database, "events"), schema=Schema(
        *[NestedField(i + 1, n, LongType(), required=False)
          for i, n in enumerate(("id", "amount", "batch"))]))
    name = f"{CATALOG}.{database}.events"
    held = ice.load_table(name, client=client)
    ends = int(held.io.properties[CREDENTIALS_EXPIRE_AT_MS]) / 1000
    assert ends - time.time() > CREDENTIALS_RENEWAL_MARGIN_S
    ingest(client, name, [1, 2], batch=1, barrier=int(time.time() * 1000))  # another writer

    kept = ice.with_fresh_credentials(held, now=ends - CREDENTIALS_RENEWAL_MARGIN_S - 60)
    assert kept is held and held.current_snapshot() is None  # not loaded again
    renewed = ice.with_fresh_credentials(held, now=ends - CREDENTIALS_RENEWAL_MARGIN_S + 60)
    assert renewed is held and held.current_snapshot() is not None  # loaded again
    assert int(held.io.properties[CREDENTIALS_EXPIRE_AT_MS]) / 1000 >= ends
    assert held.io.properties["s3.session-token"]


def test_a_streaming_query_outlives_its_vended_credentials(
        spark: Any, tmp_path: Path) -> None:
    """A store whose STS sessions end after 12 s (the catalog asks 900 s, the store grants
    less, and the answer says when they end): a query that runs for three times that long keeps
    reading and writing. Spark asks the sink for its writer at every micro-batch
    (``streamWriter``), which loads the sink's table through the catalog, so each micro-batch's
    executors write with the catalog's newest credentials; the source loads its held table
    again near their end (``with_fresh_credentials``)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from spark_plugin._iceberg.catalogs import CREDENTIALS_EXPIRE_AT_MS

    lifetime = 12
    with _sts_store(tmp_path / "store", max_session_seconds=lifetime) as short_lived, \
            vending_server(tmp_path / "server", short_lived, "short") as url, \
            sp.MetaServiceClient(url, token=TOKEN) as client:
        catalog = ice.find_catalog(CATALOG, conf={}, url=url, token=TOKEN).load()
        catalog.create_namespace("db")
        schema = Schema(*[NestedField(i + 1, n, LongType(), required=False)
                          for i, n in enumerate(("id", "amount", "batch"))])
        for table in ("events", "events_out"):
            catalog.create_table(("db", table), schema=schema)
        source, sink = f"{CATALOG}.db.events", f"{CATALOG}.db.events_out"
        started = ice.load_table(sink, client=client).io.properties
        assert int(started[CREDENTIALS_EXPIRE_AT_MS]) / 1000 - time.time() <= lifetime + 1
        sp.register_data_source(spark, url=url, token=TOKEN)
        query = (spark.readStream.format("metaservice").option("job", "copy")
                 .option("metaservice.url", url).option("metaservice.token", TOKEN)
                 .option("table", source).option("startingBarrier", "earliest").load()
                 .writeStream.format("metaservice").option("job", "copy")
                 .option("metaservice.url", url).option("metaservice.token", TOKEN)
                 .option("table", sink).option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(processingTime="1 second").start())
        try:
            def sink_at() -> int:
                try:
                    recorded = client.table_barriers(sink)["barriers"]
                except sp.UnknownTableError:  # the query has not registered its sink yet
                    return 0
                return int(recorded[0]["barrier"]) if recorded else 0

            # One batch at a time, each waited for until its barrier is committed, for three
            # lifetimes of the credentials the query started with.
            barriers: list[int] = []
            ends = time.monotonic() + 3 * lifetime
            batch = 0
            while time.monotonic() < ends and query.exception() is None:
                barriers.append(int(time.time() * 1000))
                ingest(client, source, [batch], batch, barriers[-1])
                batch += 1
                deadline = time.monotonic() + 240
                while (query.exception() is None and time.monotonic() < deadline
                       and sink_at() < barriers[-1]):
                    time.sleep(0.2)
                assert sink_at() == barriers[-1] or query.exception() is not None
            assert query.exception() is None, query.exception()
        finally:
            query.stop()
        rows = ice.load_table(sink, client=client).scan().to_arrow().to_pylist()
        assert sorted(r["batch"] for r in rows) == list(range(batch))
        assert client.table_barriers(sink)["barriers"][0]["barrier"] == barriers[-1]


def jvm_s3_client_threads(spark: Any) -> int:
    """Threads of an AWS SDK client alive in ``spark``'s JVM (the driver; in local mode the
    executors too)."""
    jvm = spark.sparkContext._jvm
    threads = jvm.java.lang.Thread.getAllStackTraces().keySet().toArray()
    return sum(1 for t in threads if str(t.getName()).startswith(("sdk-", "s3a-")))


def test_writes_and_reads_on_s3_leave_no_s3_client_in_the_jvm(
        spark: Any, server_url: str, client: sp.MetaServiceClient, store: Any,
        warehouse: str) -> None:
    """Each batch write and read of a table on S3 opens the table's FileIO in Spark's tasks and
    drops it with them: after many of them Spark's JVM holds no AWS SDK client (through
    Hadoop's S3A with its cache off, the old route, each write left ~50 such threads running
    and each read ~100). The rows and the files are checked too."""
    database, catalog = fresh_database(server_url)
    name = f"{CATALOG}.{database}.t"
    sp.create_table_from_spark_schema(name, spark.createDataFrame([], "id long, note string"),
                                      client=client)
    before = jvm_s3_client_threads(spark)
    expected: list[int] = []
    for i in range(6):
        ids = list(range(10 * i, 10 * i + 5))
        frame = spark.createDataFrame([(k, f"n{k}") for k in ids], "id long, note string")
        sp.append_root(spark, frame.repartition(2), name, client=client)
        expected += ids
        with sp.consistent_read(spark, [name], client=client, lease_seconds=None) as frames:
            assert sorted(r.id for r in frames[name].collect()) == expected
    assert jvm_s3_client_threads(spark) == before
    files = current_data_files(client, name)
    objects = bucket_keys(store, f"{warehouse}/{database}/")
    assert files and all(f.removeprefix("s3://lake/") in objects for f in files)


def _fail_once_partition_0_uploaded(endpoint: str, access: str, secret: str, prefix: str,
                                    last_id: int) -> Any:
    """A UDF (identity on ``id``) that fails on ``last_id`` once partition 0's writer has
    uploaded a file under ``prefix`` (polled with the store's admin keys; at most 30 s)."""
    from pyspark.sql import functions as F

    def check(row_id: int) -> int:
        import time as clock

        import botocore.session

        if row_id == last_id:
            s3 = botocore.session.get_session().create_client(
                "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=access,
                aws_secret_access_key=secret)
            deadline = clock.monotonic() + 30
            while clock.monotonic() < deadline:
                listed = s3.list_objects_v2(Bucket="lake", Prefix=prefix).get("Contents", [])
                if any("/part-00000-" in o["Key"] for o in listed):
                    raise RuntimeError("this task fails after partition 0 uploaded its file")
                clock.sleep(0.05)
            raise RuntimeError("partition 0 uploaded nothing within 30 s")
        return row_id

    return F.udf(check, "long")


def test_the_jvm_writer_uploads_spark_s_parquet_files_and_leaves_none_behind_a_failure(
        spark: Any, server_url: str, client: sp.MetaServiceClient, store: Any,
        warehouse: str) -> None:
    """With the plugin's jars in the session, a table on S3 is written by its JVM writer:
    Spark's own Parquet files, under one directory per write, rolled at the table's target
    size, carrying field ids (read back after a rename). A write that fails commits nothing and
    leaves no object: neither a null in a required column, nor a task failing after the other
    task uploaded its file (the writer deletes the write's directory once the job ended)."""
    from pyspark.sql import functions as F

    from spark_plugin._jvm import object_store_writer

    assert object_store_writer(spark) is not None, "the session lacks the plugin's jars"
    database, catalog = fresh_database(server_url)
    name = f"{CATALOG}.{database}.t"
    sp.create_table_from_spark_schema(
        name, spark.createDataFrame([], "id long not null, note string"), client=client,
        properties={"write.target-file-size-bytes": "1"})  # a file per 1,024 rows
    rows = spark.range(0, 3000, numPartitions=2).selectExpr("id", "concat('n', id) AS note")
    sp.append_root(spark, rows, name, client=client)

    files = current_data_files(client, name)
    data = f"{warehouse}/{database}/t/data/"
    assert len(files) == 4, files  # 1,500 rows a task: 1,024 + 476
    pattern = rf"s3://lake/{data}ms-[0-9a-f]{{32}}/part-0000[01]-\d+-00[01]\.zstd\.parquet"
    assert all(re.fullmatch(pattern, f) for f in files), files
    assert bucket_keys(store, data) == {f.removeprefix("s3://lake/") for f in files}
    # described from the footers the tasks kept: as the files read back describe themselves
    table = ice.load_table(name, client=client)
    committed = sorted((t.file for t in table.scan().plan_files()), key=lambda f: f.file_path)
    assert [describe(f) for f in committed] == [
        describe(f) for f in ice.data_files_from_parquet(table, [f.file_path for f in committed])]
    assert sum(f.record_count for f in committed) == 3000
    # the files carry field ids: after a rename, the new snapshot's schema reads them
    with catalog.load_table(f"{database}.t").update_schema() as update:
        update.rename_column("note", "label")
    sp.append_root(spark, spark.createDataFrame([(3000, "n3000")], "id long, label string"),
                   name, client=client)
    files = current_data_files(client, name)
    with sp.consistent_read(spark, [name], client=client, lease_seconds=None) as frames:
        got = sorted((r.id, r.label) for r in frames[name].collect())
    assert got == [(i, f"n{i}") for i in range(3001)]

    before = ice.load_table(name, client=client).current_snapshot()
    with pytest.raises(sp.UnsupportedSchemaError, match="null in required column 'id'"):
        nulls = spark.createDataFrame([(1, "a"), (None, "b")], "id long, label string")
        sp.append_root(spark, nulls, name, client=client)
    failing = _fail_once_partition_0_uploaded(store.endpoint, store.access_key_id,
                                              store.secret_access_key, data, last_id=2999)
    doomed = spark.range(0, 3000, numPartitions=2).select(
        failing(F.col("id")).alias("id"), F.lit("x").alias("label"))
    with pytest.raises(Exception, match="after partition 0 uploaded its file"):
        sp.append_root(spark, doomed, name, client=client)
    assert bucket_keys(store, data) == {f.removeprefix("s3://lake/") for f in files}
    assert ice.load_table(name, client=client).current_snapshot() == before


def describe(data_file: Any) -> tuple:
    """What a commit says of a data file: path, size, rows and column statistics."""
    return (data_file.file_path, data_file.file_size_in_bytes, data_file.record_count,
            data_file.column_sizes, data_file.value_counts, data_file.null_value_counts,
            data_file.lower_bounds, data_file.upper_bounds, data_file.split_offsets)


def test_a_cancelled_jvm_write_leaves_no_object(
        spark: Any, server_url: str, client: sp.MetaServiceClient, store: Any,
        warehouse: str) -> None:
    """A write whose job is cancelled while one task still runs and the other has uploaded its
    file (the caller's cancellation, not a task's error) commits nothing and leaves nothing."""
    import threading

    from pyspark.sql import functions as F

    database, catalog = fresh_database(server_url)
    name = f"{CATALOG}.{database}.t"
    sp.create_table_from_spark_schema(name, spark.createDataFrame([], "id long, note string"),
                                      client=client)
    data = f"{warehouse}/{database}/t/data/"

    def block(row_id: int) -> int:
        import time as clock

        if row_id == 1999:  # the last row of partition 1: held until the job is cancelled
            deadline = clock.monotonic() + 60
            while clock.monotonic() < deadline:
                clock.sleep(0.05)
        return row_id

    rows = spark.range(0, 2000, numPartitions=2).select(
        F.udf(block, "long")(F.col("id")).alias("id"), F.lit("x").alias("note"))
    failures: list[BaseException] = []

    def write() -> None:
        try:
            sp.append_root(spark, rows, name, client=client)
        except BaseException as error:  # noqa: BLE001 - checked below
            failures.append(error)

    writer = threading.Thread(target=write)
    writer.start()
    deadline = time.monotonic() + 60
    while not any("/part-00000-" in k for k in bucket_keys(store, data)):
        assert time.monotonic() < deadline and writer.is_alive(), "partition 0 never uploaded"
        time.sleep(0.05)
    spark.sparkContext.cancelAllJobs()
    writer.join(90)
    assert not writer.is_alive() and len(failures) == 1, failures
    assert "cancel" in str(failures[0]).lower(), failures[0]
    assert bucket_keys(store, data) == set()
    assert ice.load_table(name, client=client).current_snapshot() is None


def test_partitioned_and_uncompressed_tables_on_s3_are_written_whole(
        spark: Any, server_url: str, client: sp.MetaServiceClient, store: Any,
        warehouse: str) -> None:
    """A partitioned table on S3 is written by pyiceberg in the tasks (one file per partition
    value, described with it), not by the JVM writer; an uncompressed table by the JVM writer."""
    database, catalog = fresh_database(server_url)
    columns = "id long, region string"
    rows = spark.createDataFrame([(i, "eu" if i % 2 else "us") for i in range(10)], columns)
    parted, plain = f"{CATALOG}.{database}.parted", f"{CATALOG}.{database}.plain"
    sp.create_table_from_spark_schema(parted, rows, client=client, partition_by=["region"])
    sp.create_table_from_spark_schema(plain, rows, client=client, properties={
        "write.parquet.compression-codec": "uncompressed"})
    for table in (parted, plain):
        sp.append_root(spark, rows.repartition(2), table, client=client)
        with sp.consistent_read(spark, [table], client=client, lease_seconds=None) as frames:
            assert sorted(r.id for r in frames[table].collect()) == list(range(10))
    parted_files = ice.load_table(parted, client=client).scan().plan_files()
    assert {t.file.partition[0] for t in parted_files} == {"eu", "us"}
    assert not any("/ms-" in t.file.file_path for t in parted_files)
    plain_files = current_data_files(client, plain)
    assert plain_files and all(re.search(r"/ms-[0-9a-f]{32}/part-\d{5}-\d+-000\.parquet$", f)
                               for f in plain_files), plain_files


@pytest.mark.parametrize("layout", [None, SMALL_LAYOUT, GZIP_LAYOUT],
                         ids=["defaults", "small", "gzip"])
@pytest.mark.parametrize("columns", [FLAT, NESTED], ids=["flat", "nested"])
def test_the_jvm_writer_writes_the_files_spark_s_own_writer_writes(
        spark: Any, server_url: str, client: sp.MetaServiceClient,
        columns: tuple[tuple[str, str], ...], layout: dict[str, Any] | None,
        tmp_path: Path) -> None:
    """The JVM writer's file of every column kind (flat columns through parquet-mr's column
    writers, nested ones through Spark's writer), laid out as the table's properties say (or
    as Iceberg's defaults), is the file Spark's ``df.write.parquet`` writes of the same rows
    with the same settings: the same schema and field ids, footer, row groups, column chunks,
    statistics and size, read back as the same values."""
    from spark_plugin import _spark_io as sio

    database, _catalog = fresh_database(server_url)
    name = f"{CATALOG}.{database}.t"
    rows = rows_of_every_kind(spark, columns)
    sp.create_table_from_spark_schema(name, rows, client=client, properties={
        k: str(v) for k, v in (layout or {}).items()})
    sp.append_root(spark, rows, name, client=client)
    table = ice.load_table(name, client=client)
    [written] = [t.file for t in table.scan().plan_files()]
    assert re.search(r"/ms-[0-9a-f]{32}/part-00000-\d+-000\.(zstd|gzip)\.parquet$",
                     written.file_path)
    with table.io.new_input(written.file_path).open() as stream:
        ours = parquet_facts(stream.read())

    aligned = sio.align_to_schema(rows, table.schema(), table=name)
    with sio.scoped_spark_conf(spark, {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
                                       "spark.sql.parquet.fieldId.write.enabled": "true"}):
        aligned.write.options(**spark_writer_options(layout)).parquet(str(tmp_path / "spark"))
    [local] = (tmp_path / "spark").glob("*.parquet")
    spark_s = parquet_facts(local.read_bytes())
    assert ours == spark_s
    assert ours["rows"] == 3000
    assert all(f"field_id={n}" in ours["schema"] for n in range(1, len(columns) + 1))
    assert (ours["row_groups"] > 1) == (layout is SMALL_LAYOUT), ours["row_groups"]
    assert (ours["codec"], ours["bloom_filters"]) == (
        "GZIP" if layout is GZIP_LAYOUT else "ZSTD", ["id"] if layout is SMALL_LAYOUT else [])


@pytest.mark.parametrize("mode", ["LEGACY", "EXCEPTION"])
def test_ancient_dates_are_written_proleptic_whatever_the_session_s_rebase_mode(
        spark: Any, server_url: str, client: sp.MetaServiceClient, mode: str) -> None:
    """Iceberg's dates and timestamps are proleptic Gregorian: a session that asks Spark to
    rebase them to the hybrid calendar on write (LEGACY), or to refuse them (EXCEPTION), still
    gets them written as they are, by both of the JVM writer's routes (a flat table, and one
    with a nested column), with no legacy marker in the footer."""
    import datetime as dt

    from spark_plugin import _spark_io as sio

    database, _catalog = fresh_database(server_url)
    day, at = dt.date(1000, 1, 1), dt.datetime(1200, 3, 1, 12, tzinfo=dt.UTC)
    frames = {
        "flat": spark.createDataFrame([(1, day, at)], "id long, day date, at timestamp"),
        "nested": spark.createDataFrame([(1, day, at, (day,))],
                                        "id long, day date, at timestamp, s struct<d: date>"),
    }
    for kind, rows in frames.items():
        name = f"{CATALOG}.{database}.{kind}"
        sp.create_table_from_spark_schema(name, rows, client=client)
        with sio.scoped_spark_conf(spark, {
                "spark.sql.parquet.datetimeRebaseModeInWrite": mode,
                "spark.sql.parquet.int96RebaseModeInWrite": mode}):
            sp.append_root(spark, rows, name, client=client)
        table = ice.load_table(name, client=client)
        [row] = table.scan().to_arrow().to_pylist()
        assert (row["day"], row["at"]) == (day, at), kind
        assert row.get("s", {"d": day}) == {"d": day}, kind
        [written] = [t.file.file_path for t in table.scan().plan_files()]
        with table.io.new_input(written).open() as stream:
            footer = parquet_facts(stream.read())["key_values"]
        assert not any(k.startswith(b"org.apache.spark.legacy") for k in footer), footer


@pytest.mark.parametrize(("key", "value"), [
    ("write.parquet.page-size-bytes", "abc"), ("write.parquet.row-group-size-bytes", "0"),
    ("write.parquet.bloom-filter-fpp.column.id", "2")])
def test_a_bad_layout_property_is_a_clear_error_and_writes_nothing(
        spark: Any, server_url: str, client: sp.MetaServiceClient, store: Any, warehouse: str,
        key: str, value: str) -> None:
    """A table property of the files' layout that is no valid value fails the write before
    anything is uploaded, naming the property (``ValueError``, as pyiceberg's writer)."""
    database, _catalog = fresh_database(server_url)
    name = f"{CATALOG}.{database}.t"
    rows = spark.createDataFrame([(1, "a")], "id long, note string")
    sp.create_table_from_spark_schema(name, rows, client=client, properties={key: value})
    with pytest.raises(ValueError, match=rf"{re.escape(name)}: table property {re.escape(key)} "
                                         rf"must be .*: {re.escape(value)}$"):
        sp.append_root(spark, rows, name, client=client)
    assert ice.load_table(name, client=client).current_snapshot() is None
    assert bucket_keys(store, f"{warehouse}/{database}/t/data/") == set()
