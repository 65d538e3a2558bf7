"""Structured Streaming through the ``metaservice`` sink and source, next to uncoordinated
equivalents.

1. **Sink**: the same streaming query — Parquet files (one per micro-batch,
   ``maxFilesPerTrigger=1``, ``Trigger.AvailableNow``) → a projection → an Iceberg table — once
   with the ``metaservice`` sink (each micro-batch one barrier: offset log read, tagged Iceberg
   commit with the idempotency marker, report to MetaService) and once with an *uncoordinated*
   sink defined here: the same executor-side Parquet writer, and on the driver a plain pyiceberg
   fast append of the data files (what ``add_files`` does, without re-reading the footers), no
   MetaService. Goal: the coordinated sink keeps ≥ 0.9× the throughput. The per-barrier
   coordination overhead is the wall-clock difference divided by the number of barriers, and
   the MetaService calls one barrier makes are timed on their own.
2. **Source**: reading a root table of the same size through each streaming source, its files
   committed five barriers one after the other while the query runs, next to Spark's own
   Parquet stream reader over the same files (``maxFilesPerTrigger`` = the files of one
   barrier, the files appearing in its directory a barrier at a time while this process waits
   for each micro-batch, as it does for the sources), both into Spark's ``noop`` sink, the
   two sources alternating for as many rounds as the sink: ``metaservice_native`` (a JVM
   source whose micro-batches are Spark's own Parquet scans of the barrier's files; goal ≥
   0.9× Spark's rows/s in the steady state, the barriers after a query's first) and
   ``metaservice`` (a Python data source: pyiceberg's Arrow scan in Python workers; goal ≥
   0.8×). A query's first barrier is given apart.

The two sink variants run alternately in one SparkSession after a warm-up query (so Python
workers are already started), on a MetaService served in-process on SQLite.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._environment import server_thread, sqlite_file
from benchmarks._report import Result, better_ratio, percentile

CATALOG = "bench"


def _configure_catalog(warehouse: Path) -> dict[str, str]:
    props = {"uri": f"sqlite:///{warehouse / 'catalog.db'}", "warehouse": f"file://{warehouse}"}
    os.environ[f"PYICEBERG_CATALOG__{CATALOG.upper()}__TYPE"] = "sql"
    for k, v in props.items():
        os.environ[f"PYICEBERG_CATALOG__{CATALOG.upper()}__{k.upper()}"] = v
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return props


def _uncoordinated_source_class() -> type:
    """An Iceberg streaming sink without MetaService: executors write data files exactly as the
    ``metaservice`` sink does; the driver appends them in one plain pyiceberg commit."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter

    from spark_plugin._executor_tables import TableHandle, write_batches
    from spark_plugin._iceberg import load_table
    from spark_plugin.streaming.sink import SinkFiles

    class PlainWriter(DataSourceStreamArrowWriter):
        def __init__(self, table: str, handle: TableHandle) -> None:
            self.table, self.handle = table, handle

        def write(self, iterator: Any) -> SinkFiles:
            files, rows = write_batches(self.handle, iterator)
            return SinkFiles(files, rows)

        def commit(self, messages: list[Any], batchId: int) -> None:
            files = [f for m in messages if isinstance(m, SinkFiles) for f in m.data_files]
            table = load_table(self.table)
            tx = table.transaction()
            with tx.update_snapshot().fast_append() as append:
                for f in files:
                    append.append_data_file(f)
            tx.commit_transaction()

    class UncoordinatedIceberg(DataSource):
        @classmethod
        def name(cls) -> str:
            return "iceberg-uncoordinated"

        def streamWriter(self, schema: Any, overwrite: bool) -> PlainWriter:
            table = self.options["table"]
            return PlainWriter(table, TableHandle.of(table, load_table(table)))

    return UncoordinatedIceberg


def _write_input(directory: Path, rows: int, files: int) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    directory.mkdir(parents=True)
    per_file = rows // files
    for i in range(files):
        start = i * per_file
        ids = pa.array(range(start, start + per_file), pa.int64())
        table = pa.table({"id": ids,
                          "customer": pc.remainder(ids, 1000),
                          "amount": pc.multiply(pc.cast(ids, pa.float64()), 0.5)})
        pq.write_table(table, directory / f"part-{i:04d}.parquet")


def _create_sink(catalog: Any, name: str) -> str:
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField

    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "customer", LongType(), required=False),
                    NestedField(3, "amount", DoubleType(), required=False),
                    NestedField(4, "bucket", LongType(), required=False))
    catalog.create_namespace_if_not_exists("db")
    catalog.create_table(("db", name), schema=schema)
    return f"{CATALOG}.db.{name}"


def _run_query(spark: Any, input_dir: Path, fmt: str, options: dict[str, str]) -> float:
    df = (spark.readStream.schema("id long, customer long, amount double")
          .option("maxFilesPerTrigger", 1).parquet(str(input_dir))
          .selectExpr("id", "customer", "amount * 1.1 AS amount", "id % 100 AS bucket"))
    writer = df.writeStream.format(fmt).trigger(availableNow=True)
    for k, v in options.items():
        writer = writer.option(k, v)
    started = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"{fmt} query failed: {query.exception()}")
    return elapsed


def _service_calls_per_barrier(url: str, sink: str, samples: int) -> list[float]:
    """The MetaService calls the sink makes for one barrier of a job without sources
    (registration when Spark plans and commits the batch, the job's state, the table's latest
    barrier, the report), timed end to end over loopback."""
    import spark_plugin as sp

    job = "bench-probe"
    client = sp.MetaServiceClient(url)
    client.register_sink(job, sink)
    client.start_job(job)
    timings = []
    for i in range(samples):
        t0 = time.perf_counter()
        client.register_sink(job, sink)
        client.register_sink(job, sink)
        client.get_job(job)
        client.table_barriers(sink, limit=1)
        client.commit(job, sink, 1_000 + i, 10_000 + i)
        timings.append((time.perf_counter() - t0) * 1000)
    client.unregister(job)
    return timings


def run(quick: bool) -> list[Result]:
    rows = 200_000 if quick else 1_000_000
    batches = 10 if quick else 20  # input files
    rounds = 1 if quick else 3  # alternating, median: one run of ~10 s is noisy
    base = Path(tempfile.mkdtemp(prefix="bench_streaming_"))
    try:
        return _run(base, rows, batches, rounds)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run(base: Path, rows: int, batches: int, rounds: int) -> list[Result]:
    barriers = 5  # the source's comparison: the input files in this many barriers
    files_per_barrier = batches // barriers
    props = _configure_catalog(base / "warehouse")
    (base / "warehouse").mkdir()
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

    from spark_plugin.streaming import register_data_source

    catalog = SqlCatalog(CATALOG, **props)
    input_dir = base / "input"
    _write_input(input_dir, rows, batches)
    from spark_plugin.streaming import native_source_jar

    spark = (SparkSession.builder.master("local[2]").appName("bench-streaming")
             .config("spark.jars", native_source_jar())
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.adaptive.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with sqlite_file("streaming") as db_url, server_thread(db_url) as url:
            register_data_source(spark, url=url)
            spark.dataSource.register(_uncoordinated_source_class())
            warm = base / "warm"
            _write_input(warm, 20_000, 2)
            _run_query(spark, warm, "iceberg-uncoordinated",
                       {"table": _create_sink(catalog, "warm_plain"),
                        "checkpointLocation": str(base / "ck-warm-plain")})
            _run_query(spark, warm, "metaservice",
                       {"table": _create_sink(catalog, "warm_ms"), "job": "warm",
                        "metaservice.url": url,
                        "checkpointLocation": str(base / "ck-warm-ms")})
            coordinated, plain = [], []
            for r in range(rounds):
                plain.append(_run_query(
                    spark, input_dir, "iceberg-uncoordinated",
                    {"table": _create_sink(catalog, f"plain_{r}"),
                     "checkpointLocation": str(base / f"ck-plain-{r}")}))
                coordinated.append(_run_query(
                    spark, input_dir, "metaservice",
                    {"table": _create_sink(catalog, f"coordinated_{r}"), "job": f"bench-{r}",
                     "metaservice.url": url,
                     "checkpointLocation": str(base / f"ck-coordinated-{r}")}))
            calls = _service_calls_per_barrier(url, _create_sink(catalog, "probe"),
                                               30 if rounds == 1 else 100)
            # each source beside Spark's reader, the two sources alternating, `rounds` times
            runs: dict[str, list[tuple[SourceTimes, SourceTimes]]] = {
                "metaservice_native": [], "metaservice": []}
            for r in range(rounds):
                for fmt, done in runs.items():
                    done.append(_source_comparison(spark, catalog, url, input_dir, base,
                                                   files_per_barrier, fmt=fmt, round_=r))
            sources = {fmt: (SourceTimes.total(s for s, _ in done),
                             SourceTimes.total(n for _, n in done))
                       for fmt, done in runs.items()}
    finally:
        spark.stop()
    t_ms, t_plain = statistics.median(coordinated), statistics.median(plain)
    overhead_ms = (t_ms - t_plain) / batches * 1000
    return [
        Result.compare(
            f"streaming sink throughput, {rows:,} rows in {batches} barriers", rows / t_ms,
            "rows/s", baseline="uncoordinated pyiceberg sink", baseline_value=rows / t_plain,
            higher_is_better=True, at_least=0.9,
            goal="at least 90 % of the uncoordinated sink's rows/s",
            notes=f"wall clock of Trigger.AvailableNow queries, median of {rounds}: "
                  f"{t_ms:.1f} s vs {t_plain:.1f} s"),
        Result("coordination overhead per barrier (wall clock)", overhead_ms, "ms",
               notes="(coordinated − uncoordinated) / barriers; negative values are noise"),
        Result("MetaService calls of one barrier (p50)", percentile(calls, 50), "ms",
               notes=f"2× register, job state, latest barrier, commit report; p95 "
                     f"{percentile(calls, 95):.1f} ms over {len(calls)} barriers, SQLite"),
        *_source_results(sources, barriers, files_per_barrier, rows, rounds),
    ]


SOURCE_NOTES = {
    "metaservice_native": ("a JVM source: each micro-batch is Spark's own Parquet scan of the "
                           "barrier's files; the barrier logic answered through Py4J", 0.9),
    "metaservice": ("plans on the driver with pyiceberg and reads with pyiceberg's Arrow scan "
                    "in Python workers, handing Arrow batches to Spark", 0.8),
}


def _source_results(sources: dict[str, tuple[SourceTimes, SourceTimes]], barriers: int,
                    files_per_barrier: int, rows: int, rounds: int) -> list[Result]:
    out = []
    for fmt, (source, native) in sources.items():
        how, at_least = SOURCE_NOTES[fmt]
        out += [
            Result.compare(
                f"streaming source {fmt}, {rows - rows // barriers:,} rows in {barriers - 1} "
                "barriers after the first", source.steady_rows / source.steady_s, "rows/s",
                baseline="Spark's Parquet stream reader on the same files",
                baseline_value=native.steady_rows / native.steady_s, higher_is_better=True,
                at_least=at_least,
                goal=f"at least {at_least:.0%} of Spark's Parquet reader's rows/s",
                notes=f"{files_per_barrier} files ({rows // barriers:,} rows) a barrier, one "
                      "barrier a micro-batch, into the noop sink, the files arriving a "
                      "barrier at a time for both; time of the micro-batches after the "
                      f"query's first that read rows (Spark's progress), {rounds} round(s) "
                      "summed, each source's queries and Spark's back to back: "
                      f"{source.steady_s:.2f} s vs {native.steady_s:.2f} s; {how}"),
            Result(
                f"streaming source {fmt}, a query's first barrier ({rows // barriers:,} rows)",
                source.first_rows / source.first_s, "rows/s",
                baseline="Spark's Parquet stream reader, its first micro-batch",
                baseline_value=native.first_rows / native.first_s,
                ratio=better_ratio(source.first_rows / source.first_s,
                                   native.first_rows / native.first_s, higher_is_better=True),
                notes=f"{source.first_s:.2f} s vs {native.first_s:.2f} s"
                      + ("" if fmt != "metaservice" else ": the source's planner, a Python "
                         "process Spark starts for each query, imports pyiceberg and opens "
                         "the table (~1 s on this machine) in the first micro-batch")),
        ]
    return out


@dataclass
class SourceTimes:
    """Seconds of the micro-batches that read rows, and the rows they read."""

    first_s: float  # a query's first barrier: its planner process imports pyiceberg and opens
    first_rows: int  # the table (~1 s on this machine), its workers may be new
    steady_s: float  # every later barrier: the query's steady state
    steady_rows: int

    @staticmethod
    def total(times: Iterable[SourceTimes]) -> SourceTimes:
        """The times of several queries, summed."""
        listed = list(times)
        return SourceTimes(sum(t.first_s for t in listed), sum(t.first_rows for t in listed),
                           sum(t.steady_s for t in listed), sum(t.steady_rows for t in listed))


def _source_comparison(spark: Any, catalog: Any, url: str, input_dir: Path, base: Path,
                       files_per_barrier: int, *, fmt: str = "metaservice",
                       round_: int = 0) -> tuple[SourceTimes, SourceTimes]:
    """The ``metaservice`` source and Spark's own Parquet stream reader over the same files,
    ``files_per_barrier`` files a barrier (a micro-batch), into the ``noop`` sink."""
    import pyarrow.parquet as pq

    import spark_plugin as sp
    from spark_plugin._iceberg import commit_sink, data_files_from_parquet, load_table

    root = _create_sink(catalog, f"root_{fmt}_{round_}")
    client = sp.MetaServiceClient(url)
    table = load_table(root)
    # the same Parquet files, copied into the table, committed a barrier at a time
    data = Path(table.location().removeprefix("file://")) / "data"
    data.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in sorted(input_dir.glob("*.parquet")):
        t = pq.read_table(f)
        t = t.append_column("bucket", pc_remainder(t["id"]))
        target = data / f.name
        pq.write_table(t, target)
        paths.append(f"file://{target}")
    groups = [paths[i:i + files_per_barrier] for i in range(0, len(paths), files_per_barrier)]

    def start() -> Any:
        ms = (spark.readStream.format(fmt).option("metaservice.url", url)
              .option("job", f"bench-source-{fmt}-{round_}").option("table", root).load())
        return (ms.writeStream.format("noop").trigger(processingTime="0 seconds")
                .option("checkpointLocation", str(base / f"ck-source-{fmt}-{round_}")).start())

    query = _initialized(start)
    try:
        for i, group in enumerate(groups, start=1):
            barrier = 1_000 * i
            done = commit_sink(load_table(root), job="bench-ingest", barrier=barrier,
                               data_files=data_files_from_parquet(load_table(root), group))
            client.report_root_barrier(root, done.snapshot_id, barrier)
            _wait_for_data_batches(query, i)
    finally:
        query.stop()
    source = _source_times(query)
    # Spark's reader under the same conditions: the same files arrive a barrier's worth at a
    # time (hard links: a file appears whole) while this process waits for each micro-batch
    watched = base / f"spark-reader-{fmt}-{round_}"
    watched.mkdir(parents=True)
    query = (spark.readStream.schema("id long, customer long, amount double, bucket long")
             .option("maxFilesPerTrigger", files_per_barrier).parquet(str(watched))
             .writeStream.format("noop").trigger(processingTime="0 seconds")
             .option("checkpointLocation", str(base / f"ck-native-{fmt}-{round_}")).start())
    try:
        for i, group in enumerate(groups, start=1):
            for path in group:
                os.link(path.removeprefix("file://"), watched / Path(path).name)
            _wait_for_data_batches(query, i)
    finally:
        query.stop()
    return source, _source_times(query)


WORKER_TIMEOUT = "Python worker failed to connect back"


def _initialized(start: Any, attempts: int = 4, timeout: float = 300) -> Any:
    """The query ``start()`` starts, once its sources are initialized (the ``metaservice``
    source's Python runner is up); started again, before any data, when Spark's Python worker
    did not connect back within Spark's fixed 10 s, which a loaded machine can miss."""
    for attempt in range(attempts):
        query = start()
        deadline = time.monotonic() + timeout
        while (query.exception() is None and query.isActive
               and query.status["message"] == "Initializing sources"):
            if time.monotonic() > deadline:
                raise TimeoutError("the source query's sources were not initialized")
            time.sleep(0.05)
        error = query.exception()
        if error is None:
            return query
        if WORKER_TIMEOUT not in str(error) or attempt + 1 == attempts:
            raise RuntimeError(f"metaservice source query failed: {error}")
        query.stop()
    raise AssertionError("unreachable")


def _wait_for_data_batches(query: Any, count: int, timeout: float = 300) -> None:
    """Until ``count`` micro-batches of ``query`` read rows. Polls lightly (Spark's last
    progress, every 0.2 s): this process is also the query's driver, and the time measured is
    the micro-batches' own, which a busy poll would slow down."""
    deadline = time.monotonic() + timeout
    seen = -1
    while True:
        last = query.lastProgress
        if last is not None and last["batchId"] != seen:
            seen = last["batchId"]
            if sum(1 for p in query.recentProgress if p["numInputRows"] > 0) >= count:
                return
        if query.exception() is not None:
            raise RuntimeError(f"the source query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the source query did not read barrier {count}")
        time.sleep(0.2)


def _source_times(query: Any) -> SourceTimes:
    """Time Spark spent in the micro-batches that read rows (not the registration batch, not
    the query's start), the first of them apart."""
    batches = [(p["durationMs"]["triggerExecution"] / 1000, int(p["numInputRows"]))
               for p in query.recentProgress if p["numInputRows"] > 0]
    (first_s, first_rows), rest = batches[0], batches[1:]
    return SourceTimes(first_s, first_rows, sum(s for s, _ in rest), sum(n for _, n in rest))


def pc_remainder(column: Any) -> Any:
    import pyarrow.compute as pc

    return pc.remainder(column, 100)


if __name__ == "__main__":
    from benchmarks._report import text_table

    print(text_table(run("--quick" in sys.argv)))
