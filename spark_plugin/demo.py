"""``metaservice demo``: a streaming pipeline on Spark and Iceberg, kept consistent, in one command.

What it does, printing each step as it happens:

1. serves MetaService on an embedded SQLite file (``<dir>/metaservice.db``);
2. creates a local Iceberg warehouse (a pyiceberg SQL catalog ``lake`` on SQLite);
3. ingests a synthetic stream into two root tables, ``orders`` and ``customers`` (both roots
   complete the same barrier every ``--interval`` seconds);
4. runs two Structured Streaming jobs through the ``metaservice`` source and sink:
   ``enrich-orders`` (orders ⋈ customers → ``orders_enriched``, append) and
   ``revenue-by-segment`` (an aggregate of ``orders_enriched`` → ``revenue_by_segment``,
   complete mode);
5. every few seconds takes a *strong* OLAP read of the four tables (``consistent_read``) and
   checks the pipeline invariant at that cut — every order is enriched, and the revenue table
   sums exactly the enriched orders — next to a naive read of the latest Iceberg snapshots, which
   usually breaks it; prints the consistent versions, the lag of every table and the bottleneck
   (``GET /delay``);
6. keeps serving until Ctrl-C (or ``--duration`` seconds).

Data is tiny (a few rows per barrier) so that it starts fast on a laptop.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CATALOG = "lake"
DATABASE = "shop"
ORDERS = f"{CATALOG}.{DATABASE}.orders"
CUSTOMERS = f"{CATALOG}.{DATABASE}.customers"
ENRICHED = f"{CATALOG}.{DATABASE}.orders_enriched"
REVENUE = f"{CATALOG}.{DATABASE}.revenue_by_segment"
TABLES = (ORDERS, CUSTOMERS, ENRICHED, REVENUE)
ENRICH_JOB = "enrich-orders"
REVENUE_JOB = "revenue-by-segment"
INGEST_LABEL = "demo-ingest"
SEGMENTS = ("retail", "business", "public")


class Console:
    """Timestamped progress lines."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def say(self, topic: str, message: str) -> None:
        with self._lock:
            print(f"[{time.monotonic() - self.started:6.1f}s] {topic:<8} {message}", flush=True)

    def block(self, lines: list[str]) -> None:
        with self._lock:
            for line in lines:
                print(f"{'':18}{line}", flush=True)


# -- the server -------------------------------------------------------------------------------


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError("no free port")


@contextlib.contextmanager
def serve(database_file: Path, port: int) -> Iterator[str]:
    """MetaService on ``database_file`` (migrated first), served by uvicorn in a thread."""
    import uvicorn

    from metaservice.app import create_app
    from metaservice.db.engine import build_engine
    from metaservice.db.migrate import upgrade_to_head
    from metaservice.db.session import Database
    from metaservice.settings import Settings

    url = f"sqlite:///{database_file}"
    database = Database(build_engine(url))
    upgrade_to_head(database.engine)
    app = create_app(Settings(database_url=url, port=port, log_level="warning"),
                     database=database)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="metaservice-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the MetaService server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        database.dispose()


# -- the lake and the synthetic stream ------------------------------------------------------


def configure_lake(warehouse: Path) -> dict[str, str]:
    """The catalog ``lake`` by name (pyiceberg's environment configuration), for this process
    and for Spark's Python workers, which inherit the environment."""
    props = {"type": "sql", "uri": f"sqlite:///{warehouse / 'catalog.db'}",
             "warehouse": f"file://{warehouse}"}
    for key, value in props.items():
        os.environ[f"PYICEBERG_CATALOG__{CATALOG.upper()}__{key.upper()}"] = value
    return props


def create_tables(catalog: Any) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    def schema(*fields: tuple[str, Any]) -> Schema:
        return Schema(*[NestedField(i + 1, n, t, required=False)
                        for i, (n, t) in enumerate(fields)])

    catalog.create_namespace_if_not_exists(DATABASE)
    specs = {
        ORDERS: schema(("order_id", LongType()), ("customer_id", LongType()),
                       ("amount", DoubleType())),
        CUSTOMERS: schema(("customer_id", LongType()), ("name", StringType()),
                          ("segment", StringType())),
        ENRICHED: schema(("order_id", LongType()), ("customer_id", LongType()),
                         ("segment", StringType()), ("amount", DoubleType())),
        REVENUE: schema(("segment", StringType()), ("orders", LongType()),
                        ("revenue", DoubleType())),
    }
    for name, spec in specs.items():
        catalog.create_table((DATABASE, name.rsplit(".", 1)[1]), schema=spec)


class SyntheticStream:
    """New customers and orders every tick; both roots complete the tick's barrier.

    Orders only name customers of earlier ticks, so the inner join of orders and customers up to
    any barrier keeps every order: ``count(enriched@B) == count(orders@B)``.
    """

    def __init__(self, client: Any, catalog: Any, console: Console, seed: int = 7) -> None:
        self.client, self.catalog, self.console = client, catalog, console
        self.random = random.Random(seed)
        self.customers = 0
        self.orders = 0
        self.ticks = 0
        self.last_barrier: int | None = None

    def _append(self, table: str, rows: dict[str, list[Any]], barrier: int) -> None:
        import pyarrow as pa
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        from spark_plugin._iceberg import commit_sink, data_files_from_arrow, load_table

        tbl = load_table(table, self.catalog)
        data = pa.Table.from_pydict(rows, schema=schema_to_pyarrow(tbl.schema(),
                                                                   include_field_ids=False))
        done = commit_sink(tbl, job=INGEST_LABEL, barrier=barrier,
                           data_files=data_files_from_arrow(tbl, data))
        self.client.report_root_barrier(table, done.snapshot_id, barrier)

    def tick(self) -> tuple[int, int, int]:
        barrier = max(int(time.time() * 1000), (self.last_barrier or 0) + 1)
        new_customers = 3 if self.ticks == 0 else self.random.randint(0, 2)
        ids = list(range(self.customers + 1, self.customers + new_customers + 1))
        existing = self.customers
        self.customers += new_customers
        self._append(CUSTOMERS, {"customer_id": ids, "name": [f"customer-{i}" for i in ids],
                                 "segment": [SEGMENTS[i % len(SEGMENTS)] for i in ids]},
                     barrier)
        count = 0 if existing == 0 else self.random.randint(2, 6)
        order_ids = list(range(self.orders + 1, self.orders + count + 1))
        self.orders += count
        self._append(ORDERS, {
            "order_id": order_ids,
            "customer_id": [self.random.randint(1, existing) for _ in order_ids],
            "amount": [round(self.random.uniform(5, 200), 2) for _ in order_ids]}, barrier)
        self.ticks += 1
        self.last_barrier = barrier
        return barrier, new_customers, count


# -- Spark ------------------------------------------------------------------------------------


def start_spark() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("metaservice-demo")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.adaptive.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             # tiny data: the client compiler and a serial GC start the JVM twice as fast
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class Jobs:
    """The two streaming jobs of the pipeline, defined in Spark's idiom."""

    def __init__(self, spark: Any, url: str, checkpoints: Path, trigger_seconds: float) -> None:
        self.spark, self.url, self.checkpoints = spark, url, checkpoints
        self.trigger = f"{trigger_seconds} seconds"
        self.queries: list[Any] = []

    def _source(self, job: str, table: str) -> Any:
        return (self.spark.readStream.format("metaservice").option("metaservice.url", self.url)
                .option("job", job).option("table", table).load())

    def _sink(self, df: Any, job: str, table: str, mode: str) -> Any:
        query = (df.writeStream.format("metaservice").option("metaservice.url", self.url)
                 .option("job", job).option("table", table).outputMode(mode)
                 .option("checkpointLocation", str(self.checkpoints / job))
                 .trigger(processingTime=self.trigger).queryName(job).start())
        self.queries.append(query)
        return query

    def start_enrichment(self) -> Any:
        """orders ⋈ customers (a stream-stream join: both sides at the same barrier) →
        orders_enriched, append."""
        orders = self._source(ENRICH_JOB, ORDERS)
        customers = self._source(ENRICH_JOB, CUSTOMERS).select("customer_id", "segment")
        enriched = (orders.join(customers, "customer_id")
                    .select("order_id", "customer_id", "segment", "amount"))
        return self._sink(enriched, ENRICH_JOB, ENRICHED, "append")

    def start_revenue(self) -> Any:
        """orders_enriched → orders and revenue per segment, complete mode (one overwrite
        snapshot per barrier)."""
        from pyspark.sql import functions as F

        revenue = (self._source(REVENUE_JOB, ENRICHED).groupBy("segment")
                   .agg(F.count(F.lit(1)).alias("orders"), F.sum("amount").alias("revenue")))
        return self._sink(revenue, REVENUE_JOB, REVENUE, "complete")

    def check(self) -> None:
        for q in self.queries:
            if q.exception() is not None:
                raise RuntimeError(f"query {q.name} failed: {q.exception()}")


# -- reading and checking ---------------------------------------------------------------------


@dataclass
class Totals:
    orders: int
    orders_amount: float
    enriched: int
    enriched_amount: float
    revenue_orders: int
    revenue_amount: float

    @property
    def holds(self) -> bool:
        return (self.orders == self.enriched == self.revenue_orders
                and abs(self.orders_amount - self.enriched_amount) < 0.005
                and abs(self.enriched_amount - self.revenue_amount) < 0.005)

    def describe(self) -> str:
        return (f"orders {self.orders} (Σ {self.orders_amount:,.2f}), enriched {self.enriched} "
                f"(Σ {self.enriched_amount:,.2f}), revenue table {self.revenue_orders} orders "
                f"(Σ {self.revenue_amount:,.2f})")


def totals_from_frames(frames: dict[str, Any]) -> Totals:
    def agg(table: str, count: str, amount: str) -> tuple[int, float]:
        row = frames[table].selectExpr(f"coalesce({count}, 0) AS n",
                                       f"coalesce({amount}, 0) AS s").collect()[0]
        return int(row.n), float(row.s)

    o = agg(ORDERS, "count(*)", "sum(amount)")
    e = agg(ENRICHED, "count(*)", "sum(amount)")
    r = agg(REVENUE, "sum(orders)", "sum(revenue)")
    return Totals(o[0], o[1], e[0], e[1], r[0], r[1])


def naive_totals(catalog: Any) -> Totals:
    """What a reader of each table's latest Iceberg snapshot sees, uncoordinated."""
    import pyarrow.compute as pc

    from spark_plugin._iceberg import load_table

    def agg(table: str, count: str | None, amount: str) -> tuple[int, float]:
        data = load_table(table, catalog).scan().to_arrow()
        n = data.num_rows if count is None else int(pc.sum(data[count]).as_py() or 0)
        return n, float(pc.sum(data[amount]).as_py() or 0.0)

    o = agg(ORDERS, None, "amount")
    e = agg(ENRICHED, None, "amount")
    r = agg(REVENUE, "orders", "revenue")
    return Totals(o[0], o[1], e[0], e[1], r[0], r[1])


def clock(ms: int | None) -> str:
    if ms is None:
        return "—"
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def seconds(ms: int | None) -> str:
    return "—" if ms is None else f"{ms / 1000:.1f} s"


def delay_lines(client: Any) -> list[str]:
    """The lag table and the bottleneck, from ``GET /delay`` (or computed from versions)."""
    from spark_plugin._errors import NotFoundError, UnknownTableError

    try:
        delay = client.request("GET", "/delay", idempotent=True)
    except NotFoundError:
        delay = None
    lines = [f"{'table':<28} {'latest barrier':<14} {'lag':>8}  writer"]
    if delay is not None:
        by_table = {t["table"]: t for t in delay["tables"]}
        for name in TABLES:
            t = by_table.get(name, {})
            lines.append(f"{name:<28} {clock(t.get('latest_barrier')):<14} "
                         f"{seconds(t.get('lag_ms')):>8}  {t.get('writer_job') or 'ingestion'}")
        b = delay.get("bottleneck")
        if b:
            lines.append(f"bottleneck: {b['job']} (local lag {seconds(b.get('local_lag_ms'))}, "
                         f"last hop {seconds(b.get('recent_hop_latency_ms'))})")
        return lines
    now = int(time.time() * 1000)
    latest: dict[str, int | None] = {}
    for name in TABLES:
        try:
            latest[name] = client.table_barriers(name, limit=1).get("latest_barrier")
        except UnknownTableError:
            latest[name] = None
        lag = None if latest[name] is None else now - int(latest[name])  # type: ignore[arg-type]
        lines.append(f"{name:<28} {clock(latest[name]):<14} {seconds(lag):>8}")
    local = {ENRICH_JOB: _gap(min(_v(latest[ORDERS]), _v(latest[CUSTOMERS])), latest[ENRICHED]),
             REVENUE_JOB: _gap(latest[ENRICHED], latest[REVENUE])}
    worst = max(local, key=lambda j: _v(local[j]))
    lines.append(f"bottleneck: {worst} (local lag {seconds(local[worst])}; GET /delay is not "
                 "served here, so lags are computed from the tables' latest barriers)")
    return lines


def _v(x: int | None) -> int:
    return -1 if x is None else int(x)


def _gap(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None or a < 0 else max(0, int(a) - int(b))


# -- the command ------------------------------------------------------------------------------


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="metaservice demo", description=__doc__)
    parser.add_argument("--duration", type=float, default=None,
                        help="stop by itself this many seconds after both jobs have committed "
                             "(default: run until Ctrl-C)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="keep the demo's files here (default: a temporary directory, "
                             "removed at exit)")
    parser.add_argument("--port", type=int, default=8000,
                        help="port of the server (default 8000; a free one if it is taken)")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between two ingested barriers (default 1)")
    parser.add_argument("--report-every", type=float, default=6.0,
                        help="seconds between two strong reads (default 6)")
    return parser


def run(args: argparse.Namespace) -> int:
    import logging

    logging.getLogger().setLevel(logging.WARNING)
    for noisy in ("httpx", "py4j", "spark_plugin", "metaservice", "uvicorn"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    console = Console()
    keep = args.dir is not None
    base = Path(args.dir) if keep else Path(tempfile.mkdtemp(prefix="metaservice-demo-"))
    if keep and base.exists() and any(base.iterdir()):
        shutil.rmtree(base)
    base.mkdir(parents=True, exist_ok=True)
    warehouse = base / "warehouse"
    warehouse.mkdir()
    print("MetaService demo: two streaming jobs over Iceberg, read consistently while they run.",
          flush=True)
    port = _free_port(args.port)
    try:
        with serve(base / "metaservice.db", port) as url:
            os.environ["METASERVICE_URL"] = url
            note = "" if port == args.port else f" (port {args.port} is taken)"
            console.say("server", f"{url}{note}  — API docs {url}/docs{_dashboard(url)}, "
                                  f"SQLite {base / 'metaservice.db'}")
            return _pipeline(args, console, url, base, warehouse)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


def _dashboard(url: str) -> str:
    import httpx

    try:
        found = httpx.get(f"{url}/ui", timeout=5, follow_redirects=True).status_code == 200
    except httpx.HTTPError:
        found = False
    return f", dashboard {url}/ui" if found else ""


def _pipeline(args: argparse.Namespace, console: Console, url: str, base: Path,
              warehouse: Path) -> int:
    props = configure_lake(warehouse)
    from pyiceberg.catalog.sql import SqlCatalog

    import spark_plugin as sp
    from spark_plugin.streaming import register_data_source

    catalog = SqlCatalog(CATALOG, **{k: v for k, v in props.items() if k != "type"})
    create_tables(catalog)
    console.say("lake", f"Iceberg warehouse {warehouse} (pyiceberg SQL catalog '{CATALOG}')")
    console.say("tables", f"{ORDERS} + {CUSTOMERS} (roots) → {ENRICH_JOB} → {ENRICHED} → "
                          f"{REVENUE_JOB} → {REVENUE}")
    client = sp.MetaServiceClient(url)
    stream = SyntheticStream(client, catalog, console)
    for _ in range(2):
        barrier, c, o = stream.tick()
        console.say("ingest", f"barrier {clock(barrier)}: +{c} customers, +{o} orders")
    console.say("spark", "starting a local[2] session; the first micro-batches start Spark's "
                         "Python workers (about a minute on two cores)")
    spark = start_spark()
    register_data_source(spark, url=url)
    jobs = Jobs(spark, url, base / "checkpoints", max(0.5, args.interval / 2))
    stop = threading.Event()

    def ingest_forever() -> None:
        while not stop.wait(args.interval):
            try:
                b, nc, no = stream.tick()
                if stream.ticks <= 3 or stream.ticks % 10 == 0:
                    console.say("ingest", f"barrier {clock(b)}: +{nc} customers, +{no} orders "
                                          f"(tick {stream.ticks})")
            except Exception as exc:  # noqa: BLE001 - shown, the demo goes on
                console.say("ingest", f"failed: {type(exc).__name__}: {exc}")

    feeder = threading.Thread(target=ingest_forever, name="demo-ingest", daemon=True)
    reads = held = 0
    try:
        # A table that joins a pipeline behind the strong cut it serves is "catching up" (not
        # readable in strong reads) until it reaches the cut of the rest of its component; with
        # the roots moving every second a starting job never would. So the jobs start while
        # ingestion pauses, one after the other, and the stream resumes once both caught up.
        console.say("ingest", "paused while the jobs start and catch up with the roots")
        jobs.start_enrichment()
        console.say("spark", f"streaming job {ENRICH_JOB} started (orders ⋈ customers, append)")
        _wait_for_barrier(console, client, jobs, ENRICHED, ENRICH_JOB, stream.last_barrier)
        jobs.start_revenue()
        console.say("spark", f"streaming job {REVENUE_JOB} started (aggregate, complete mode)")
        _wait_for_barrier(console, client, jobs, REVENUE, REVENUE_JOB, stream.last_barrier)
        feeder.start()
        console.say("ingest", f"resumed: new customers and orders every {args.interval:g} s")
        console.say("pipeline", "both jobs have caught up: strong reads every "
                                f"{args.report_every:g} s, "
                                + (f"for {args.duration:g} s" if args.duration is not None
                                   else "until Ctrl-C"))
        started = time.monotonic()
        next_report = time.monotonic()
        while args.duration is None or time.monotonic() - started < args.duration:
            jobs.check()
            if time.monotonic() >= next_report:
                ok = _report(console, spark, client, catalog)
                if ok is not None:
                    reads += 1
                    held += ok
                next_report = time.monotonic() + (args.report_every if ok is not None else 2)
            time.sleep(0.2)
        console.say("done", f"{reads} strong reads, invariant held in {held} of them; "
                            f"{stream.ticks} barriers ingested")
        return 0 if held == reads else 1
    except KeyboardInterrupt:
        console.say("done", f"interrupted: {reads} strong reads, invariant held in {held}")
        return 0
    finally:
        stop.set()
        _stop_quietly(spark, jobs.queries)


def _wait_for_barrier(console: Console, client: Any, jobs: Jobs, table: str, job: str,
                      barrier: int | None) -> None:
    """Until ``table`` completes ``barrier`` (printing each commit)."""
    from spark_plugin._errors import UnknownTableError

    seen = None
    while True:
        jobs.check()
        try:
            latest = client.table_barriers(table, limit=1).get("latest_barrier")
        except UnknownTableError:
            latest = None
        if latest is not None and latest != seen:
            seen = latest
            console.say("commit", f"{job} committed barrier {clock(latest)} to {table}")
        if latest is not None and barrier is not None and latest >= barrier:
            return
        time.sleep(0.2)


def _stop_quietly(spark: Any, queries: list[Any]) -> None:
    """Stop the queries (their listener unregisters the jobs) and Spark, without the errors
    Spark logs when a micro-batch is interrupted."""
    with contextlib.suppress(Exception):
        spark.sparkContext.setLogLevel("OFF")
    with contextlib.suppress(Exception):
        # pyspark's accumulator server prints an EOFError when a connection closes under it
        server = spark.sparkContext._accumulatorServer
        if server is not None:
            server.handle_error = lambda *a, **k: None
    for q in queries:
        with contextlib.suppress(Exception):
            q.stop()
    with contextlib.suppress(Exception):
        spark.stop()


def _report(console: Console, spark: Any, client: Any, catalog: Any) -> bool | None:
    """One strong read and its report; ``None`` when no strong cut covers every table yet
    (a table still catching up with its component)."""
    import spark_plugin as sp

    naive = naive_totals(catalog)
    try:
        with sp.consistent_read(spark, list(TABLES), "strong", client=client, catalog=catalog,
                                lease_seconds=60) as frames:
            cut = {frames.versions[t].barrier for t in TABLES}
            totals = totals_from_frames(frames)
            versions = dict(frames.versions)
    except (sp.CatchingUpError, sp.NoVersionError) as exc:
        behind = [t for t in TABLES
                  if client.table_barriers(t, limit=1).get("catching_up")]
        console.say("read", f"no strong cut over all four tables yet ({exc.code}"
                            + (f": {', '.join(behind)} catching up" if behind else "") + ")")
        return None
    mark = "holds" if totals.holds else "BROKEN"
    console.say("read", f"strong cut at barrier {clock(min(cut))}: invariant {mark} — "
                        f"{totals.describe()}")
    lines = ["consistent versions: " + ", ".join(
        f"{t.rsplit('.', 1)[1]}@{versions[t].snapshot_id}" for t in TABLES)]
    lines.append("naive latest snapshots: invariant "
                 + ("holds" if naive.holds else f"broken — {naive.describe()}"))
    lines += delay_lines(client)
    console.block(lines)
    return totals.holds


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
