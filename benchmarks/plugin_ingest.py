"""The Spark plugin's costs, side by side with what a job pays without MetaService.

1. Root ingestion throughput: ``append_root`` (Spark's Parquet writer with field ids, one tagged
   Iceberg commit with its idempotency marker, the root report) against a plain
   ``df.write.parquet`` of the same cached DataFrame.
2. Coordination overhead per barrier of a ``BarrierJob``: asking for the barrier
   (``barriers/next``), the tagged commit's extra work (lineage check and marker) and the report,
   against the plain pyiceberg commit an uncoordinated job makes anyway.

``python -m benchmarks plugin_ingest [--quick]`` (through the harness) or
``python -m benchmarks.plugin_ingest [--quick]`` (prints only). The server runs in its own
process (``metaservice serve``) on a temporary SQLite file, as deployed; Spark is ``local[2]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks._environment import free_port
from benchmarks._report import Result, percentile, text_table


@contextlib.contextmanager
def _server(directory: Path) -> Iterator[str]:
    import httpx

    port = free_port()
    env = {**os.environ, "METASERVICE_DATABASE_URL": f"sqlite:///{directory / 'ms.db'}",
           "METASERVICE_LOG_LEVEL": "warning"}
    log = (directory / "server.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "metaservice", "serve", "--port", str(port)],
                               env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}; see {log.name}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become ready")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _spark() -> Any:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bench-plugin")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _ingestion(spark: Any, catalog: Any, client: Any, scratch: Path, rows: int,
               repeats: int) -> list[Result]:
    import spark_plugin as sp

    df = spark.range(rows).selectExpr(
        "id", "id % 1000 AS customer", "cast(id % 9973 AS double) * 1.5 AS amount",
        "timestamp_ntz '2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id % 86400)"
        " AS created_at",
        "concat('item-', cast(id % 5000 AS string)) AS item").repartition(2).cache()
    df.count()
    table = "lake.bench.orders"
    sp.create_table_from_spark_schema(table, df, catalog=catalog)
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    plugin, plain = [], []
    for i in range(repeats + 1):  # the first round warms the JVM and the Python workers up
        started = time.perf_counter()
        sp.append_root(spark, df, table, client=client, catalog=catalog)
        plugin_s = time.perf_counter() - started
        out = scratch / f"plain-{i}"
        started = time.perf_counter()
        df.write.option("compression", "zstd").parquet(str(out))
        plain_s = time.perf_counter() - started
        shutil.rmtree(out, ignore_errors=True)
        if i:
            plugin.append(rows / plugin_s)
            plain.append(rows / plain_s)
    df.unpersist()
    value, baseline = statistics.median(plugin), statistics.median(plain)
    return [Result.compare(
        f"root ingestion, append_root ({rows:,} rows, 5 columns)", value, "rows/s",
        baseline="plain df.write.parquet, same data", baseline_value=baseline,
        higher_is_better=True, at_least=0.7, goal="at least 70 % of the plain write's rows/s",
        notes=f"median of {repeats}; append_root = Spark write with field ids + one tagged "
              "Iceberg commit with marker + root report")]


def _coordination(spark: Any, catalog: Any, client: Any, barriers: int) -> list[Result]:
    import spark_plugin as sp
    from spark_plugin import _iceberg as ice

    schema = spark.createDataFrame([], "id long, amount double").schema
    root, sink, plain_sink = "lake.bench.ticks", "lake.bench.ticks_out", "lake.bench.plain_out"
    for t in (root, sink, plain_sink):
        sp.create_table_from_spark_schema(t, schema, catalog=catalog)
    sp.append_root(spark, spark.createDataFrame([(1, 1.0)], schema), root, client=client,
                   catalog=catalog, barrier=1)
    plain_table = ice.load_table(plain_sink, catalog)
    nothing = plain_table.scan().to_arrow()
    rounds: list[float] = []
    iceberg_only: list[float] = []
    plain_commits: list[float] = []
    job = sp.BarrierJob(spark, "bench-coordination", [root], [sink], client=client,
                        catalog=catalog)
    with job:
        for b in range(2, barriers + 2):
            sp.heartbeat_root(root, client=client, catalog=catalog, barrier=b)
            started = time.perf_counter()
            step = job.next()
            assert step is not None
            sink_table = job._table(sink)
            t0 = time.perf_counter()
            ice.commit_sink(sink_table, job=job.job, barrier=step.barrier)
            iceberg_s = time.perf_counter() - t0
            step.commit()  # finds the Iceberg commit (a replay) and reports it
            rounds.append((time.perf_counter() - started) * 1000)
            iceberg_only.append(iceberg_s * 1000)
            t0 = time.perf_counter()
            plain_table.refresh()
            plain_table.append(nothing)
            plain_commits.append((time.perf_counter() - t0) * 1000)
    overhead = [r - p for r, p in zip(rounds, plain_commits, strict=True)]
    p50 = percentile(overhead, 50)
    return [
        Result.compare(
            "coordination overhead per barrier, p50", p50, "ms",
            baseline="plain pyiceberg commit per barrier", baseline_value=percentile(
                plain_commits, 50),
            higher_is_better=False, at_least=1, goal="less than the commit a job makes anyway",
            notes=f"{barriers} barriers; overhead = (next + tagged commit + report) − plain "
                  f"commit; p95 {percentile(overhead, 95):.1f} ms; tagged commit alone p50 "
                  f"{percentile(iceberg_only, 50):.1f} ms"),
        Result.absolute(
            "BarrierJob round per barrier (next + tagged commit + report), p50",
            percentile(rounds, 50), "ms", goal="≤ 250 ms", met_if=lambda v: v <= 250,
            notes=f"p95 {percentile(rounds, 95):.1f} ms; SQLite catalog, SQLite server"),
    ]


def run(quick: bool) -> list[Result]:
    from pyiceberg.catalog.sql import SqlCatalog

    import spark_plugin as sp

    scratch = Path(tempfile.mkdtemp(prefix="bench_plugin_"))
    try:
        catalog = SqlCatalog("lake", uri=f"sqlite:///{scratch / 'catalog.db'}",
                             warehouse=f"file://{scratch / 'warehouse'}")
        catalog.create_namespace("bench")
        spark = _spark()
        with _server(scratch) as url, sp.MetaServiceClient(url) as client:
            results = _ingestion(spark, catalog, client, scratch,
                                 rows=200_000 if quick else 2_000_000, repeats=2 if quick else 3)
            results += _coordination(spark, catalog, client, barriers=15 if quick else 60)
        return results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plugin_ingest",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller data, fewer barriers")
    args = parser.parse_args(argv)
    print(text_table(run(args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
