"""Spark 3.5 with the stock Apache Iceberg runtime against the catalog
(docs/contract.md#the-built-in-catalog, docs/contract.md#consistent-warehouses): what a consistent
read and a recorded write cost Spark.

One SparkSession (``local[2]``, the rig of the catalog's Spark tests: ``tests/engines/spark35``,
set up by its ``install.sh``) and one ``metaservice serve`` process (one uvicorn worker, as
deployed) on a fresh, migrated database (PostgreSQL when reachable, else SQLite), its warehouse
in a scratch directory on the local disk.

*A join in a strong read session.* A fan-out pipeline built through the catalog with pyiceberg
(as ``tests/metaservice/catalog/pipeline.py``): a root table ``db.orders`` of N rows (``id``,
``amount``) appended with a ``metaservice.barrier``, and two sibling jobs ``a`` and ``b`` that
each start, are handed that barrier and copy the orders at its snapshot into their own table
(``db.a``, ``db.b``), committed with ``metaservice.job`` and ``metaservice.barrier``. The three
tables have a strong cut at that barrier, and the head is at the same snapshots, so both read
the same data files. One Spark SQL query joins the three tables (``orders ⋈ a ⋈ b`` on ``id``,
answering a count and a sum, both checked) through a catalog on the head (``warehouse=lake``)
and through one on the consistent warehouse (``warehouse=lake@strong``), both with
``cache-enabled=false``, so every query loads its three tables from the catalog (through the
consistent warehouse: in the read session, which leases the snapshots it serves and rewrites
the metadata at the cut). After two warm-up queries through a third catalog (JIT, class
loading), each of the two catalogs is registered and its first query timed (reported in the
notes: through the consistent warehouse it opens the read session and fixes the cut); then the
two alternate, the order swapped every round, so both see the same load on the machine.
Throughput is orders rows joined per second of query (client-timed round trip to the driver).
Goal: the read session ≥ 0.95× the head (p50s).

*A Spark append recorded by MetaService.* ``spark.sql("SELECT id, ..., note FROM
range(N)").writeTo(t).option("snapshot-property.metaservice.barrier", B).append()`` of N = 10⁶
rows into a table of the REST catalog on the head (the server records barrier B of the root
table in the commit), against the same append into a table of an Iceberg Hadoop catalog
(``type=hadoop``, its warehouse a scratch directory on the same disk). One untimed warm-up
append each, then the two alternate (order swapped every round); afterwards the barriers
MetaService recorded are checked against the snapshots Spark made. Goal: ≥ 0.9× the Hadoop
catalog's throughput (medians). Both tables are created with
``write.parquet.compression-codec=zstd``, so both write the same Parquet whatever each
catalog's default (Iceberg's Java catalogs put it into every table they create, and so does
this catalog's ``createTable`` now; without it Spark writes Iceberg's older default, gzip:
0.58× the Hadoop catalog's throughput in a quick run here, against 0.76× with zstd).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import _environment as environment
from benchmarks._report import Result, percentile

NAMESPACE = "db"
JOBS = ("a", "b")
APPEND_TABLE = "bench.appends"
APPEND_COLUMNS = "id bigint, amount bigint, note string"


def spark_driver(log: Path) -> Any:
    """The rig's SparkDriver; a clear error (not a skip) when the rig is not installed."""
    from tests.engines.spark35 import rig

    missing = [str(p) for p in (rig.PYTHON, *rig.JARS) if not p.exists()]
    if missing:
        raise RuntimeError(f"the Spark 3.5 rig is missing ({', '.join(missing)}): set it up with "
                           "bash engines/spark35/install.sh")
    return rig.SparkDriver(log)


@dataclass
class Measured:
    backend: str
    join_rows: int
    append_rows: int
    start_seconds: float = 0.0
    join_s: dict[str, list[float]] = field(default_factory=lambda: {"head": [], "session": []})
    join_cpu_ms: dict[str, list[float]] = field(default_factory=lambda: {"head": [], "session": []})
    join_spark_cpu_s: dict[str, list[float]] = field(
        default_factory=lambda: {"head": [], "session": []})
    first_s: dict[str, float] = field(default_factory=dict)
    append_s: dict[str, list[float]] = field(
        default_factory=lambda: {"catalog": [], "hadoop": []})
    append_cpu_ms: list[float] = field(default_factory=list)
    append_spark_cpu_s: dict[str, list[float]] = field(
        default_factory=lambda: {"catalog": [], "hadoop": []})
    barriers_checked: int = 0


@contextmanager
def _site(backend: str) -> Iterator[tuple[environment.ServerProcess, Path]]:
    """A migrated database, its server (warehouse in a scratch directory) and the scratch
    directory."""
    scratch = Path(tempfile.mkdtemp(prefix="bench_spark_views_"))
    database = (environment.postgres_schema("spark_views") if backend == "postgresql"
                else environment.sqlite_file("spark_views"))
    try:
        with database as url, environment.server_processes(url, extra_env={
                "METASERVICE_WAREHOUSE": str(scratch / "rest-warehouse")}) as (server,):
            yield server, scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU time so far of process ``root`` and its descendants (the Spark driver
    and its JVM): unlike wall time, it hardly moves with the load of other work on the
    machine."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    total, pending = 0.0, [root]
    while pending:
        pid = pending.pop()
        try:
            total += environment.process_cpu_seconds(pid)
        except (OSError, IndexError, ValueError):
            continue
        pending += children.get(pid, [])
    return total


def _barrier(previous: int = 0) -> int:
    return max(previous + 1, int(time.time() * 1000))


def build_pipeline(server_url: str, rows: int) -> int:
    """The fan-out pipeline at one barrier with ``rows`` orders; answers the barrier."""
    import httpx
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog

    schema = pa.schema([pa.field("id", pa.int64()), pa.field("amount", pa.int64())])
    catalog = RestCatalog("lake", uri=f"{server_url}/iceberg", warehouse="lake")
    catalog.create_namespace(NAMESPACE)
    tables = {name: catalog.create_table(f"{NAMESPACE}.{name}", schema=schema)
              for name in ("orders", *JOBS)}
    with httpx.Client(base_url=server_url, timeout=120) as client:
        for job in JOBS:
            for role, table in (("source", "orders"), ("sink", job)):
                client.post(f"/register/{role}/{job}/lake/{NAMESPACE}/{table}").raise_for_status()
        barrier = _barrier()
        orders = pa.table({"id": pa.array(range(rows), pa.int64()),
                           "amount": pa.array(range(0, 3 * rows, 3), pa.int64())}, schema=schema)
        tables["orders"].append(orders,
                                snapshot_properties={"metaservice.barrier": str(barrier)})
        for job in JOBS:
            step = client.post(f"/jobs/{job}/start", json={})
            step.raise_for_status()
            answer = step.json()
            if (answer["action"], answer["barrier"]) != ("process", barrier):
                raise RuntimeError(f"job {job} was handed {answer}, not barrier {barrier}")
            orders = catalog.load_table(f"{NAMESPACE}.orders").scan(
                snapshot_id=answer["snapshots"][f"lake.{NAMESPACE}.orders"]).to_arrow()
            tables[job].overwrite(orders, snapshot_properties={
                "metaservice.job": job, "metaservice.barrier": str(barrier)})
        strong = client.post("/versions", json={
            "consistency": "strong",
            "tables": [f"lake.{NAMESPACE}.{t}" for t in ("orders", *JOBS)]})
        strong.raise_for_status()
        cut = {v["barrier"] for v in strong.json()["versions"].values()}
        if cut != {barrier}:
            raise RuntimeError(f"the pipeline's strong cut is at {cut}, not {barrier}")
    return barrier


def join_query(catalog: str) -> str:
    t = f"{catalog}.{NAMESPACE}"
    return (f"SELECT count(*), sum(o.amount + a.amount + b.amount) FROM {t}.orders o "
            f"JOIN {t}.a a ON o.id = a.id JOIN {t}.b b ON o.id = b.id")


def measure_join(spark: Any, server: environment.ServerProcess, rows: int, repeats: int,
                 out: Measured) -> None:
    expected = [[rows, 9 * rows * (rows - 1) // 2]]  # 3 × amount = 3 × 3 × id

    def query(catalog: str) -> tuple[float, float, float]:
        cpu, spark_cpu = server.cpu_seconds(), tree_cpu_seconds(spark.pid)
        started = time.perf_counter()
        answer = spark.sql(join_query(catalog))
        seconds = time.perf_counter() - started
        if answer != expected:
            raise RuntimeError(f"the join through {catalog} answered {answer}, not {expected}")
        return (seconds, (server.cpu_seconds() - cpu) * 1000,
                tree_cpu_seconds(spark.pid) - spark_cpu)

    def register(name: str, warehouse: str) -> str:
        spark.catalog(name, type="rest", uri=f"{server.url}/iceberg", warehouse=warehouse,
                      **{"cache-enabled": "false"})
        return name

    warm = register("warm", "lake")
    for _ in range(2):
        query(warm)
    catalogs = {"head": register("lake", "lake"), "session": register("lake_strong", "lake@strong")}
    for side in ("head", "session"):
        out.first_s[side] = query(catalogs[side])[0]
    for k in range(repeats):
        for side in (("head", "session") if k % 2 == 0 else ("session", "head")):
            seconds, cpu_ms, spark_cpu_s = query(catalogs[side])
            out.join_s[side].append(seconds)
            out.join_cpu_ms[side].append(cpu_ms)
            out.join_spark_cpu_s[side].append(spark_cpu_s)


def measure_append(spark: Any, server: environment.ServerProcess, scratch: Path, rows: int,
                   repeats: int, out: Measured) -> None:
    import spark_plugin as sp

    spark.catalog("lake", type="rest", uri=f"{server.url}/iceberg", warehouse="lake",
                  **{"cache-enabled": "false"})
    spark.catalog("hadoop", type="hadoop", warehouse=f"file://{scratch / 'hadoop-warehouse'}",
                  **{"cache-enabled": "false"})
    query = (f"SELECT id, id * 7 % 1000 AS amount, concat('order-', id) AS note "
             f"FROM range({rows})")
    for catalog in ("lake", "hadoop"):
        spark.sql(f"CREATE NAMESPACE {catalog}.bench")
        spark.sql(f"CREATE TABLE {catalog}.{APPEND_TABLE} ({APPEND_COLUMNS}) USING iceberg "
                  f"TBLPROPERTIES ('write.parquet.compression-codec' = 'zstd')")
    given: list[int] = []

    def append(side: str) -> tuple[float, float, float]:
        cpu, spark_cpu = server.cpu_seconds(), tree_cpu_seconds(spark.pid)
        started = time.perf_counter()
        if side == "catalog":
            given.append(_barrier(given[-1] if given else 0))
            spark.append_query(f"lake.{APPEND_TABLE}", query,
                               **{"snapshot-property.metaservice.barrier": str(given[-1])})
        else:
            spark.append_query(f"hadoop.{APPEND_TABLE}", query)
        return (time.perf_counter() - started, (server.cpu_seconds() - cpu) * 1000,
                tree_cpu_seconds(spark.pid) - spark_cpu)

    append("catalog"), append("hadoop")  # warm-up, not counted
    for k in range(repeats):
        for side in (("catalog", "hadoop") if k % 2 == 0 else ("hadoop", "catalog")):
            seconds, cpu_ms, spark_cpu_s = append(side)
            out.append_s[side].append(seconds)
            out.append_spark_cpu_s[side].append(spark_cpu_s)
            if side == "catalog":
                out.append_cpu_ms.append(cpu_ms)
    # MetaService recorded one barrier per append, each with the snapshot Spark made.
    snapshots = [r[0] for r in spark.sql(
        f"SELECT snapshot_id FROM lake.{APPEND_TABLE}.snapshots ORDER BY committed_at")]
    with sp.MetaServiceClient(server.url) as client:
        recorded = client.table_barriers(f"lake.{APPEND_TABLE}",
                                         limit=len(given) + 1)["barriers"]
    got = [(b["barrier"], b["snapshot_id"]) for b in reversed(recorded)]
    expected = list(zip(given, snapshots, strict=False))
    if len(given) != len(snapshots) or got != expected:
        raise RuntimeError(f"recorded barriers {got[:3]}… != {expected[:3]}… "
                           f"({len(given)} appends, {len(snapshots)} snapshots)")
    for catalog, side in (("lake", "catalog"), ("hadoop", "hadoop")):
        [[count]] = spark.sql(f"SELECT count(*) FROM {catalog}.{APPEND_TABLE}")
        if count != rows * (1 + len(out.append_s[side])):
            raise RuntimeError(f"{catalog}.{APPEND_TABLE} holds {count} rows")
    out.barriers_checked = len(got)


def measure(backend: str, *, join_rows: int, join_repeats: int, append_rows: int,
            append_repeats: int, log: Path) -> Measured:
    out = Measured(backend, join_rows, append_rows)
    with _site(backend) as (server, scratch):
        build_pipeline(server.url, join_rows)
        spark = spark_driver(log)
        try:
            out.start_seconds = spark.start_seconds
            measure_join(spark, server, join_rows, join_repeats, out)
            measure_append(spark, server, scratch, append_rows, append_repeats, out)
        finally:
            spark.close()
    return out


def results(m: Measured) -> list[Result]:
    label = "PostgreSQL" if m.backend == "postgresql" else "SQLite"
    join = {side: percentile(s, 50) for side, s in m.join_s.items()}
    cpu = {side: statistics.median(c) for side, c in m.join_cpu_ms.items()}
    append = {side: statistics.median(s) for side, s in m.append_s.items()}
    spread: Callable[[list[float]], str] = lambda s: f"{min(s):.2f}–{max(s):.2f} s"  # noqa: E731
    # Each round runs both sides back to back: the median of the rounds' own ratios is less
    # exposed to a change of load between rounds than the ratio of the two medians.
    join_rounds = statistics.median(h / v for h, v in zip(m.join_s["head"], m.join_s["session"],
                                                          strict=True))
    append_rounds = statistics.median(h / c for h, c in zip(
        m.append_s["hadoop"], m.append_s["catalog"], strict=True))
    # CPU time (Spark's driver and JVM, plus the server) per query: the work itself, which the
    # load of other processes on the machine hardly changes.
    join_cpu = {side: statistics.median(c) + cpu[side] / 1000
                for side, c in m.join_spark_cpu_s.items()}
    append_cpu = {side: statistics.median(c) for side, c in m.append_spark_cpu_s.items()}
    append_cpu["catalog"] += statistics.median(m.append_cpu_ms) / 1000
    return [
        Result.compare(
            f"Spark SQL join of 3 tables in a strong read session, {m.join_rows:,} rows ({label})",
            m.join_rows / join["session"], "rows/s",
            baseline="the same join through the head", baseline_value=m.join_rows / join["head"],
            higher_is_better=True, at_least=0.95, goal="at least 95 % of the head's rows/s",
            notes=f"p50 {join['session']:.2f} s through lake@strong vs {join['head']:.2f} s "
                  f"through lake over {len(m.join_s['session'])} alternating queries each "
                  f"(read session {spread(m.join_s['session'])}, "
                  f"head {spread(m.join_s['head'])}; median of "
                  f"the rounds' ratios {join_rounds:.2f}×), the same "
                  f"snapshots and data files, cache-enabled=false on both (3 loadTable per "
                  f"query); CPU per query (Spark's driver and JVM + server) "
                  f"{join_cpu['session']:.2f} s vs {join_cpu['head']:.2f} s "
                  f"({join_cpu['head'] / join_cpu['session']:.2f}×), "
                  f"of which server {cpu['session']:.0f} ms vs {cpu['head']:.0f} ms; "
                  f"first query of a freshly registered catalog (through lake@strong "
                  f"it opens the read session and fixes the cut): {m.first_s['session']:.2f} s vs "
                  f"{m.first_s['head']:.2f} s; SparkSession start {m.start_seconds:.0f} s"),
        Result.compare(
            f"Spark append of {m.append_rows:,} rows through the catalog with a barrier ({label})",
            m.append_rows / append["catalog"], "rows/s",
            baseline="the same append, Iceberg Hadoop catalog on local disk",
            baseline_value=m.append_rows / append["hadoop"],
            higher_is_better=True, at_least=0.9,
            goal="at least 90 % of the Hadoop catalog's rows/s",
            notes=f"median {append['catalog']:.2f} s vs {append['hadoop']:.2f} s over "
                  f"{len(m.append_s['catalog'])} alternating appends each (catalog "
                  f"{spread(m.append_s['catalog'])}, Hadoop {spread(m.append_s['hadoop'])}; "
                  f"median of the rounds' ratios {append_rounds:.2f}×), "
                  f"after one warm-up append each; writeTo(…).append() of SELECT … FROM "
                  f"range(n) (id, amount, note), snapshot-property.metaservice.barrier on the "
                  f"catalog's; both tables zstd (write.parquet.compression-codec set at "
                  f"creation on both); CPU per append "
                  f"(Spark's driver and JVM, + server for the catalog) {append_cpu['catalog']:.2f}"
                  f" s vs {append_cpu['hadoop']:.2f} s "
                  f"({append_cpu['hadoop'] / append_cpu['catalog']:.2f}×), of which server "
                  f"{statistics.median(m.append_cpu_ms):.0f} ms; {m.barriers_checked} recorded "
                  f"barriers checked against Spark's snapshots"),
    ]


def run(quick: bool) -> list[Result]:
    backend = "postgresql" if environment.postgres_reachable() else "sqlite"
    sizes = (dict(join_rows=300_000, join_repeats=6, append_rows=300_000, append_repeats=4)
             if quick else
             dict(join_rows=1_000_000, join_repeats=10, append_rows=1_000_000, append_repeats=7))
    log = Path(tempfile.gettempdir()) / "bench_spark_views_driver.log"
    return results(measure(backend, log=log, **sizes))


if __name__ == "__main__":
    from benchmarks._report import text_table

    print(text_table(run(quick=True)))
