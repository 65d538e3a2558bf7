"""The soak's workload: each role one long-running OS process.

    python -m metaservice_soak.roles ROLE --url URL --token TOKEN --state DIR --seed N \\
        [--spark-master spark://127.0.0.1:PORT] [--python /path/to/venv/bin/python]

Roles (tables in ``metaservice_soak.rows``; everything through the server's built-in catalog):

- ``ingest_plugin``: batches into root ``orders`` with the plugin's ``append_root`` (Spark);
- ``ingest_engine``: batches into root ``payments`` as plain pyiceberg appends (another engine:
  the catalog records each commit's ``metaservice.barrier`` for the root);
- ``sibling_batch``: a ``BarrierJob`` loop, ``orders`` → ``orders_by_batch`` (Spark);
- ``sibling_stream``: a Structured Streaming query through the ``metaservice`` source and sink,
  ``orders`` → ``orders_by_stream`` (Spark);
- ``join``: a ``BarrierJob`` loop, the siblings' outputs joined on the order, with ``payments``
  → ``ledger`` (Spark);
- ``stalled_join``: a new job on ``orders`` → ``orders_stalled`` that starts and never commits,
  until SIGTERM, when it unregisters;
- ``reader_duckdb``, ``reader_pyiceberg``, ``reader_spark``: the invariant
  (``metaservice_soak.invariant``) on every read of a strong cut; ``reader_head``: the same check
  on the head, which is expected to break.

Restarts (a SIGKILL at any moment, then the same command): an ingest role keeps the batch it is
appending and the barrier it chose in ``DIR/state/ROLE.json`` (written before the append) and,
restarted, resolves that append first: ``append_root`` with the same explicit barrier finds an
earlier commit of it and only makes sure it is reported (the plugin's replay), and the pyiceberg
role looks for its snapshot of that barrier in the table it then appends to (the commit asserts
that table's current snapshot, so an append that landed meanwhile makes it fail and be looked
for again). Jobs are restarted as a scheduler restarts them: the same job id, started again
(the server hands a job its pinned barrier again, and the plugin's sink commits find a commit of
that barrier and do not repeat it); the streaming query restarts from its checkpoint.

Events (``DIR/events/ROLE.jsonl``): besides ``acked``, ``commit``, ``read``, ``http_5xx`` and
``error``, every role notes ``started`` and ``exited``; a reader notes ``unavailable`` when the
cut it asked for serves no version of some table yet (no barrier yet, catching up, or the
tables not yet one pipeline), which is no read; the stalled job notes ``joined`` and
``unregistered``. A 5xx is noted for every request of the plugin's client and of pyiceberg's
catalog made in the role's process (DuckDB's own requests, and those of Spark's Python workers,
are not seen).

Stop: ingest roles watch ``DIR/control/stop_ingest``; then each finishes its append, notes its
root's last barrier in ``DIR/control/last_ROLE.json``, waits for the other's, and heartbeats its
root at one final barrier F (the greater of the two, plus one), so that every table of the
pipeline can reach F; then writes ``DIR/final/ROLE.json`` and exits 0. SIGTERM stops a job
gracefully (an open step is aborted, its barrier handed out again; the job stays registered,
except the stalled one, which unregisters) and a reader after its current read.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from metaservice_soak import invariant
from metaservice_soak.rows import (
    BATCH_JOB,
    CATALOG,
    INGEST_ROLES,
    JOIN_JOB,
    LEDGER,
    LEDGER_ORDER,
    LEDGER_PAYMENT,
    NAMESPACE,
    ORDERS,
    ORDERS_BY_BATCH,
    ORDERS_BY_STREAM,
    ORDERS_LABEL,
    PAYMENTS,
    PAYMENTS_LABEL,
    PIPELINE,
    STALLED_JOB,
    STALLED_SINK,
    STREAM_JOB,
    Events,
    StateDir,
    batch_rows,
    ensure_tables,
    spark_schema,
    write_json_atomically,
)

INGEST_PERIOD_SECONDS = {"ingest_plugin": 2.0, "ingest_engine": 3.0}
JOB_PERIOD_SECONDS = {"sibling_batch": 3.0, "join": 5.0}
STREAM_TRIGGER = "4 seconds"
# Every read scans each table whole, and the tables gain a data file per barrier: on two shared
# cores a read every few seconds per engine is what the soak affords.
READ_PERIOD_SECONDS = {"strong": 5.0, "head": 10.0}
RETRY_SECONDS = 2.0
FINAL_WAIT_SECONDS = 600.0

ROLES: dict[str, Callable[[Role], int]] = {}


def role(name: str) -> Callable[[Callable[[Role], int]], Callable[[Role], int]]:
    def register(fn: Callable[[Role], int]) -> Callable[[Role], int]:
        ROLES[name] = fn
        return fn
    return register


# -- what every role has ----------------------------------------------------------------------


class Role:
    """A role's arguments, its events, its clients and its stop flag."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.name: str = args.role
        self.url: str = args.url.rstrip("/")
        self.token: str | None = args.token or None
        self.seed: int = args.seed
        self.spark_master: str | None = args.spark_master
        self.python: str = args.python or sys.executable
        self.state = StateDir(args.state)
        self.events = Events(self.state.events_file(self.name))
        self.terminated = threading.Event()
        self._spark: Any = None

    # SIGTERM: a graceful stop at the next safe point
    def install_sigterm(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.terminated.set())

    def sleep(self, seconds: float) -> bool:
        """Sleep; True when SIGTERM came meanwhile."""
        return self.terminated.wait(seconds)

    # -- clients that note every 5xx --------------------------------------------------------

    def note_5xx(self, method: str, url: str, status: int) -> None:
        if status >= 500:
            path = url.split("://", 1)[-1]
            path = path[path.find("/"):] if "/" in path else "/"
            self.events.write("http_5xx", method=method, path=path.split("?", 1)[0],
                              status=status)

    def client(self) -> Any:
        import httpx

        import spark_plugin as sp

        role = self

        class Observed(httpx.HTTPTransport):
            def handle_request(self, request: httpx.Request) -> httpx.Response:
                response = super().handle_request(request)
                role.note_5xx(request.method, str(request.url), response.status_code)
                return response

        return sp.MetaServiceClient(self.url, token=self.token, transport=Observed(),
                                    max_retries=6, max_backoff_seconds=5.0)

    def catalog(self, warehouse: str = CATALOG) -> Any:
        """pyiceberg's REST catalog on the server's built-in catalog (``warehouse``: the head
        ``lake``, or a consistent warehouse such as ``lake@strong``: a new read session)."""
        from pyiceberg.catalog import load_catalog

        props = {"type": "rest", "uri": f"{self.url}/iceberg", "warehouse": warehouse}
        if self.token:
            props["token"] = self.token
        catalog = load_catalog(CATALOG, **props)
        session = getattr(catalog, "_session", None)
        if session is not None:  # requests.Session: every answer passes this hook
            session.hooks["response"].append(
                lambda r, *a, **k: self.note_5xx(r.request.method, r.url, r.status_code))
        return catalog

    # -- Spark --------------------------------------------------------------------------------

    def spark(self) -> Any:
        """A driver on the standalone cluster (``--spark-master``; ``local[1]`` without one),
        one executor of one core; ``PYSPARK_PYTHON`` names ``--python`` before the
        SparkContext starts (docs/cluster.md)."""
        if self._spark is not None:
            return self._spark
        local = self.state.root / "spark" / self.name
        local.mkdir(parents=True, exist_ok=True)
        os.environ["PYSPARK_PYTHON"] = self.python
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ["SPARK_LOCAL_DIRS"] = str(local)
        # the streaming source's and sink's notes of this driver, for its listener
        os.environ["METASERVICE_SPARK_STATE_DIR"] = str(self.state.root / "spark-state"
                                                       / self.name)
        log4j2 = local / "log4j2.properties"
        log4j2.write_text("rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = stderr\n"
                          "appender.stderr.type = Console\nappender.stderr.name = stderr\n"
                          "appender.stderr.target = SYSTEM_ERR\n"
                          "appender.stderr.layout.type = PatternLayout\n"
                          "appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n")
        from metaservice_soak.spark_cluster import driver_builder

        builder = driver_builder(self.spark_master or "local[1]", f"soak-{self.name}")
        self._spark = (
            builder
            .config("spark.cores.max", "1")  # one executor: 4-5 drivers share two cores
            .config("spark.sql.streaming.stopTimeout", "20000")
            .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
                    f"-Dlog4j2.configurationFile={log4j2.as_uri()}")
            .getOrCreate())
        self._spark.sparkContext.setLogLevel("ERROR")
        return self._spark

    @contextlib.contextmanager
    def read_session_turn(self) -> Iterator[None]:
        """While held, no other reader of this soak opens a read session (``lake@strong``):
        what appears in the token's sessions meanwhile is the holder's own (a SIGKILLed holder's
        turn ends with its process)."""
        with (self.state.root / "state" / "read_sessions.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def error(self, exc: BaseException) -> None:
        if self.terminated.is_set():
            return  # stopping: Spark's JVM may be going down with this process
        self.events.write("error", message=f"{type(exc).__name__}: {exc}"[:2000],
                          where=traceback.format_exc(limit=6)[-2000:])


def _api_status(exc: BaseException) -> int | None:
    return getattr(exc, "status_code", None) or getattr(exc, "status", None)


# -- ingestion --------------------------------------------------------------------------------


class Ingestion:
    """One ingest role's batches: the next batch number, and the append in flight (its batch
    and barrier), kept in ``DIR/state/ROLE.json`` before the append is sent."""

    def __init__(self, r: Role, root: str, label: str,
                 append: Callable[[int, int], int], heartbeat: Callable[[int], None]) -> None:
        self.r, self.root, self.label = r, root, label
        self.append, self.heartbeat = append, heartbeat
        self.client = r.client()
        saved = r.state.load(r.name) or {}
        self.next_batch: int = saved.get("next_batch", 0)
        self.pending: dict[str, int] | None = saved.get("pending")
        self.rows: int = saved.get("rows", 0)
        acked = [e for e in r.state.events(r.name) if e.get("kind") == "acked"]
        self.acked_batches = {e["batch"] for e in acked if "batch" in e}

    def _save(self) -> None:
        self.r.state.save(self.r.name, {"next_batch": self.next_batch, "pending": self.pending,
                                        "rows": self.rows})

    def latest_barrier(self) -> int | None:
        import spark_plugin as sp

        try:
            latest = self.client.table_barriers(self.root, limit=1).get("latest_barrier")
        except sp.UnknownTableError:
            return None
        return None if latest is None else int(latest)

    def _acked(self, batch: int, barrier: int) -> None:
        rows = batch_rows(self.r.seed, self.root, batch)
        if batch not in self.acked_batches:  # a restart after the line was written: not twice
            self.r.events.write("acked", table=self.root, ids=rows["id"], barrier=barrier,
                                batch=batch)
            self.acked_batches.add(batch)
        self.rows += len(rows["id"])
        self.next_batch, self.pending = batch + 1, None
        self._save()

    def resolve_pending(self) -> None:
        """Settle the append whose outcome is unknown (a crash or an error after it was sent):
        committed → acked; not committed → appended now with the same barrier."""
        while self.pending is not None:
            batch, barrier = self.pending["batch"], self.pending["barrier"]
            try:
                done = self.append(batch, barrier)  # finds an earlier commit of ``barrier``
                self._acked(batch, done)
            except Exception as exc:  # noqa: BLE001 - noted, retried: the outcome stays unknown
                self.r.error(exc)
                if self.r.sleep(RETRY_SECONDS):
                    return

    def run(self) -> int:
        from spark_plugin import barrier_after

        period = INGEST_PERIOD_SECONDS[self.r.name]
        self.resolve_pending()
        while not self.r.state.ingest_stopping() and not self.r.terminated.is_set():
            started = time.monotonic()
            try:
                barrier = barrier_after(self.latest_barrier())
            except Exception as exc:  # noqa: BLE001
                self.r.error(exc)
                self.r.sleep(RETRY_SECONDS)
                continue
            self.pending = {"batch": self.next_batch, "barrier": barrier}
            self._save()
            self.resolve_pending()
            self.r.sleep(max(0.0, period - (time.monotonic() - started)))
        if self.r.terminated.is_set() and not self.r.state.ingest_stopping():
            return 0
        return self.finish()

    def finish(self) -> int:
        """One final barrier for both roots: each notes its last barrier, F is the greater plus
        one, each heartbeats its root at F."""
        self.resolve_pending()
        if self.pending is not None:  # SIGTERM while the append's outcome is unknown
            return 0
        note = self.r.state.root / "control" / f"last_{self.r.name}.json"
        while not note.exists():
            try:
                write_json_atomically(note, {"barrier": self.latest_barrier()})
            except Exception as exc:  # noqa: BLE001
                self.r.error(exc)
                if self.r.sleep(RETRY_SECONDS):
                    return 0
        notes = [self.r.state.root / "control" / f"last_{name}.json" for name in INGEST_ROLES]
        deadline = time.monotonic() + FINAL_WAIT_SECONDS
        while not all(n.exists() for n in notes):
            if time.monotonic() > deadline:
                self.r.events.write("error", message="the other ingest role noted no last "
                                                     f"barrier in {FINAL_WAIT_SECONDS:g} s")
                return 1
            if self.r.sleep(0.5):
                return 0
        lasts = [json.loads(n.read_text())["barrier"] for n in notes]
        final = max(b for b in lasts if b is not None) + 1
        while True:
            try:
                self.heartbeat(final)
                break
            except Exception as exc:  # noqa: BLE001
                self.r.error(exc)
                if self.r.sleep(RETRY_SECONDS):
                    return 0
        write_json_atomically(self.r.state.final_file(self.r.name),
                              {"last_barrier": final, "rows": self.rows,
                               "table": self.root, "batches": self.next_batch})
        return 0


@role("ingest_plugin")
def ingest_plugin(r: Role) -> int:
    """``append_root`` into ``orders``, each batch at the barrier noted before it is sent: a
    replay of that barrier commits nothing twice (it finds the earlier commit)."""
    import spark_plugin as sp

    catalog = r.catalog()
    ensure_tables(catalog)
    spark = r.spark()
    client = r.client()
    columns = spark_schema()

    def append(batch: int, barrier: int) -> int:
        data = batch_rows(r.seed, ORDERS, batch)
        rows = list(zip(data["id"], data["customer"], data["amount"], strict=True))
        df = spark.createDataFrame(rows, columns).coalesce(1)
        return sp.append_root(spark, df, ORDERS, client=client, catalog=catalog,
                              barrier=barrier, label=ORDERS_LABEL).barrier

    def heartbeat(barrier: int) -> None:
        sp.heartbeat_root(ORDERS, client=client, catalog=catalog, barrier=barrier,
                          label=ORDERS_LABEL)

    ingestion = Ingestion(r, ORDERS, ORDERS_LABEL, append, heartbeat)
    return ingestion.run()


@role("ingest_engine")
def ingest_engine(r: Role) -> int:
    """Plain pyiceberg appends into ``payments`` through the built-in catalog, whose commit
    records the snapshot's ``metaservice.barrier`` for the root
    (docs/contract.md#commits-through-the-catalog)."""
    import pyarrow as pa
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    import spark_plugin as sp

    catalog = r.catalog()
    ensure_tables(catalog)
    client = r.client()
    identifier = (NAMESPACE, PAYMENTS.rsplit(".", 1)[1])

    def committed_in(tbl: Any, barrier: int) -> int | None:
        for snapshot in tbl.metadata.snapshots:
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            if (summary.get("metaservice.root-label") == PAYMENTS_LABEL
                    and summary.get("metaservice.barrier") == str(barrier)):
                return barrier
        return None

    def append(batch: int, barrier: int) -> int:
        while True:
            tbl = catalog.load_table(identifier)
            if committed_in(tbl, barrier) is not None:
                return barrier
            data = pa.Table.from_pydict(batch_rows(r.seed, PAYMENTS, batch),
                                        schema=schema_to_pyarrow(tbl.schema(),
                                                                 include_field_ids=False))
            try:
                # the commit asserts ``tbl``'s current snapshot: one that landed since the look
                # above (an earlier attempt of this very append) makes it fail, and look again
                tbl.append(data, snapshot_properties={"metaservice.root-label": PAYMENTS_LABEL,
                                                      "metaservice.barrier": str(barrier)})
                return barrier
            except CommitFailedException:
                continue

    def heartbeat(barrier: int) -> None:
        sp.heartbeat_root(PAYMENTS, client=client, catalog=catalog, barrier=barrier,
                          label=PAYMENTS_LABEL)

    ingestion = Ingestion(r, PAYMENTS, PAYMENTS_LABEL, append, heartbeat)
    return ingestion.run()


# -- jobs -------------------------------------------------------------------------------------


def barrier_job_loop(r: Role, job_id: str, sources: list[str], sink: str,
                     transform: Callable[[Any, Any], tuple[Any, str]], period: float) -> int:
    """Run ``job_id`` step after step until SIGTERM. A failure ends this run of the job as a
    crash would (its open step is left to the server) and starts it again, as a scheduler
    restarts a job: the server hands its pinned barrier out again and the sink's commit of it,
    if it was made, is found and not repeated."""
    import spark_plugin as sp

    catalog = r.catalog()
    ensure_tables(catalog)
    spark = r.spark()
    client = r.client()
    job: Any = None
    while not r.terminated.is_set():
        try:
            if job is None:
                job = sp.BarrierJob(spark, job_id, sources=sources, sinks=[sink],
                                    client=client, catalog=catalog)
                job.start()
            step = job.next()
            if step is None:
                r.sleep(min(2.0, (job.retry_after_ms or 1000) / 1000))
                continue
            df, mode = transform(step, spark)
            step.write(sink, df, mode=mode)
            commits = step.commit()
            for table, commit in commits.items():
                r.events.write("commit", table=table, barrier=commit.barrier,
                               snapshot=commit.snapshot_id, full=step.is_full)
            r.sleep(period)
        except Exception as exc:  # noqa: BLE001 - noted; the job is started again
            r.error(exc)
            job = None
            r.sleep(RETRY_SECONDS)
    if job is not None and job._step is not None and job._step.state == "open":
        with contextlib.suppress(Exception):
            job._step.abort("stopped by SIGTERM")  # handed out again; the job stays registered
    return 0


def _rows(df: Any) -> Any:
    return df.select("id", "customer", "amount")


@role("sibling_batch")
def sibling_batch(r: Role) -> int:
    def copy(step: Any, spark: Any) -> tuple[Any, str]:
        return _rows(step.read_changes(ORDERS)), "append"

    return barrier_job_loop(r, BATCH_JOB, [ORDERS], ORDERS_BY_BATCH, copy,
                            JOB_PERIOD_SECONDS["sibling_batch"])


@role("join")
def join(r: Role) -> int:
    """The orders both siblings hold (joined on the whole row), and the payments, into the
    ledger: incrementally, or in full when a step is full or a sibling's change between the two
    barriers was not an append."""
    from pyspark.sql import functions as F

    import spark_plugin as sp

    def ledger(step: Any, spark: Any) -> tuple[Any, str]:
        read: Callable[[str], Any] = step.read_changes
        mode = "append"
        if step.is_full:
            read, mode = step.read, "overwrite"
        try:
            batch, stream, payments = (read(t) for t in (ORDERS_BY_BATCH, ORDERS_BY_STREAM,
                                                         PAYMENTS))
        except sp.NotAppendOnlyError:
            read, mode = step.read, "overwrite"
            batch, stream, payments = (read(t) for t in (ORDERS_BY_BATCH, ORDERS_BY_STREAM,
                                                         PAYMENTS))
        orders = (_rows(batch).join(_rows(stream), ["id", "customer", "amount"], "inner")
                  .withColumn("kind", F.lit(LEDGER_ORDER)))
        paid = _rows(payments).withColumn("kind", F.lit(LEDGER_PAYMENT))
        return orders.unionByName(paid), mode

    return barrier_job_loop(r, JOIN_JOB, [ORDERS_BY_BATCH, ORDERS_BY_STREAM, PAYMENTS], LEDGER,
                            ledger, JOB_PERIOD_SECONDS["join"])


@role("sibling_stream")
def sibling_stream(r: Role) -> int:
    """``orders`` → ``orders_by_stream`` through the ``metaservice`` source and sink, from the
    earliest barrier, its checkpoint in ``DIR/checkpoints``. A restart resumes from the
    checkpoint. SIGTERM stops the query without unregistering the job (the listener, which
    unregisters a query's jobs when it terminates, is removed first)."""
    import spark_plugin as sp

    catalog = r.catalog()
    ensure_tables(catalog)
    spark = r.spark()
    client = r.client()
    listener = sp.register_data_source(spark, url=r.url, token=r.token)
    options = {"metaservice.url": r.url, "job": STREAM_JOB}
    if r.token:
        options["metaservice.token"] = r.token
    query = (spark.readStream.format("metaservice").options(**options)
             .option("table", ORDERS).option("startingBarrier", "earliest").load()
             .select("id", "customer", "amount")
             .writeStream.format("metaservice").options(**options)
             .option("table", ORDERS_BY_STREAM)
             .option("checkpointLocation", str(r.state.root / "checkpoints" / STREAM_JOB))
             .trigger(processingTime=STREAM_TRIGGER).queryName(STREAM_JOB).start())
    seen: int | None = None
    status = 0
    while not r.terminated.is_set():
        failure = query.exception()
        if failure is not None:
            r.events.write("error", message=f"query failed: {str(failure)[:2000]}")
            status = 1
            break
        try:
            latest = client.table_barriers(ORDERS_BY_STREAM, limit=1)
            if latest.get("writer_job") == STREAM_JOB and latest.get("latest_barrier") != seen:
                seen = latest.get("latest_barrier")
                r.events.write("commit", table=ORDERS_BY_STREAM, barrier=seen,
                               snapshot=latest.get("latest_snapshot_id"))
        except Exception as exc:  # noqa: BLE001 - the server may be down a while
            r.error(exc)
        r.sleep(1.0)
    with contextlib.suppress(Exception):
        spark.streams.removeListener(listener)
    with contextlib.suppress(Exception):
        query.stop()
    return status


@role("stalled_join")
def stalled_join(r: Role) -> int:
    """A new job joins the pipeline (a source already in it, a new sink), starts, and never
    commits; SIGTERM unregisters it. It never gets to reading or writing, so it is the plugin's
    client's calls a job makes up to there (plan, start), with no Spark."""
    catalog = r.catalog()
    ensure_tables(catalog)
    client = r.client()
    joined = False
    while not joined and not r.terminated.is_set():
        try:
            client.register_source(STALLED_JOB, ORDERS)
            client.register_sink(STALLED_JOB, STALLED_SINK)
            position = client.start_job(STALLED_JOB)
            r.events.write("joined", job=STALLED_JOB, sink=STALLED_SINK,
                           action=position.action, barrier=position.barrier)
            joined = True
        except Exception as exc:  # noqa: BLE001
            r.error(exc)
            r.sleep(RETRY_SECONDS)
    r.terminated.wait()
    while True:
        try:
            client.unregister(STALLED_JOB)
            r.events.write("unregistered", job=STALLED_JOB)
            return 0
        except Exception as exc:  # noqa: BLE001 - the server may be down a while
            r.events.write("error", message=f"{type(exc).__name__}: {exc}"[:2000])
            time.sleep(RETRY_SECONDS)


# -- readers ----------------------------------------------------------------------------------


# what an engine says when the cut it asked for has no version of a table (none yet, not even
# a first report, or the table is catching up): DuckDB's own words for a table a session does
# not serve, the server's codes in pyiceberg's and the plugin's errors
UNAVAILABLE = ("catching_up", "no_version", "unknown_table", "NoSuchTable", "does not exist",
               "NoVersionError", "UnknownTableError", "CatchingUpError")


class Unavailable(Exception):
    """No read of one cut over the five tables now (a table with no version yet, catching up,
    or not yet in the pipeline's component); not a violation."""


def reader_loop(r: Role, engine: str, read: Callable[[], tuple[dict[str, Any], dict[str, int]]],
                strong: bool = True) -> int:
    while not r.terminated.is_set():
        started = time.monotonic()
        try:
            totals, barriers = read()
            if strong and len(set(barriers.values())) > 1:
                components = _unconnected(r, barriers)
                if components:
                    raise Unavailable(components)
            broken = invariant.breaches(totals)
            fields: dict[str, Any] = {"engine": engine, "ok": not broken, "barriers": barriers,
                                      "rows": invariant.describe(totals)}
            if broken:
                fields["detail"] = "; ".join(broken)
            if not strong:
                fields["head"] = True
            r.events.write("read", **fields)
        except Unavailable as exc:
            r.events.write("unavailable", engine=engine, detail=str(exc)[:1000])
        except Exception as exc:  # noqa: BLE001
            text = str(exc)
            if any(code in text for code in UNAVAILABLE):
                r.events.write("unavailable", engine=engine, detail=text[:1000])
            else:
                r.error(exc)
        period = READ_PERIOD_SECONDS["strong" if strong else "head"]
        r.sleep(max(0.5, period - (time.monotonic() - started)))
    return 0


def _unconnected(r: Role, barriers: dict[str, int]) -> str:
    """Why tables read at different barriers are not one cut: a derived table whose job is not
    running (so the roots are in components of their own); '' when they are one pipeline."""
    import spark_plugin as sp

    with r.client() as client:
        writers = {}
        for t in (ORDERS_BY_BATCH, ORDERS_BY_STREAM, LEDGER):
            try:
                writers[t] = client.table_barriers(t, limit=1).get("writer_job")
            except sp.UnknownTableError:
                writers[t] = None
    missing = [t for t, w in writers.items() if not w]
    return (f"tables at different barriers {barriers} while {missing} have no running writer"
            if missing else "")


def _strong_barriers(tables: dict[str, Any]) -> dict[str, int]:
    return {name: int(t.properties["metaservice.barrier"]) for name, t in tables.items()
            if "metaservice.barrier" in t.properties}


def pyiceberg_read(r: Role, warehouse: str) -> tuple[dict[str, Any], dict[str, int]]:
    if warehouse == CATALOG:  # the head: no read session
        return _pyiceberg_tables(r.catalog(warehouse))
    with r.read_session_turn():
        catalog = r.catalog(warehouse)  # a consistent warehouse: a new read session, one cut
        try:
            return _pyiceberg_tables(catalog)
        finally:
            # a read session is a lease (its prefix ``session-<id>``): released once read, so
            # that a reader every few seconds holds none between its reads
            prefix = catalog.properties.get("prefix", "")
            if prefix.startswith("session-"):
                with contextlib.suppress(Exception), r.client() as client:
                    client.release_lease(prefix.removeprefix("session-"))


def _pyiceberg_tables(catalog: Any) -> tuple[dict[str, Any], dict[str, int]]:
    tables = {name: catalog.load_table((NAMESPACE, name.rsplit(".", 1)[1]))
              for name in PIPELINE}
    data = {name: t.scan(selected_fields=("id", "customer", "amount", "kind")
                         if name == LEDGER else ("id", "customer", "amount")).to_arrow()
            for name, t in tables.items()}
    return invariant.totals_from_arrow(data), _strong_barriers(tables)


@role("reader_pyiceberg")
def reader_pyiceberg(r: Role) -> int:
    return reader_loop(r, "pyiceberg", lambda: pyiceberg_read(r, f"{CATALOG}@strong"))


@role("reader_head")
def reader_head(r: Role) -> int:
    return reader_loop(r, "head", lambda: pyiceberg_read(r, CATALOG), strong=False)


@role("reader_duckdb")
def reader_duckdb(r: Role) -> int:
    from metaservice.duckdb_offline import connect

    connection = connect()
    attachments = [0]
    auth = "AUTHORIZATION_TYPE 'none'"
    if r.token:
        connection.execute(f"CREATE SECRET soak_token (TYPE iceberg, TOKEN '{r.token}')")
        auth = "SECRET soak_token"

    client = r.client()
    holder = f"{CATALOG}@strong"  # the holder of the lease that is a read session of lake@strong

    def sessions() -> set[str]:
        return {lease["lease_id"] for lease in client.list_leases(holder=holder, limit=1000)}

    def read() -> tuple[dict[str, Any], dict[str, int]]:
        # DETACH tells the server nothing: the session the ATTACH opened is found among the
        # token's sessions and released, else it would live its term (an hour by default)
        # and a read every few seconds would reach the cap of live sessions per token (429)
        with r.read_session_turn():
            before = sessions()
            try:
                return attached()
            finally:
                for lease_id in sessions() - before:
                    client.release_lease(lease_id)

    def attached() -> tuple[dict[str, Any], dict[str, int]]:
        attachments[0] += 1
        alias = f"strong_{attachments[0]}"
        connection.execute(f"ATTACH '{CATALOG}@strong' AS {alias} (TYPE iceberg, ENDPOINT "
                           f"'{r.url}/iceberg', {auth})")
        try:
            def path(name: str) -> str:
                return f"{alias}.{NAMESPACE}.{name.rsplit('.', 1)[1]}"

            data = {name: connection.execute(f"SELECT * FROM {path(name)}").fetch_arrow_table()
                    for name in PIPELINE}
            barriers = {name: int(row[0]) for name in PIPELINE for row in connection.execute(
                f"SELECT value FROM iceberg_table_properties({path(name)}) "
                "WHERE key = 'metaservice.barrier'").fetchall()}
        finally:
            connection.execute(f"DETACH {alias}")
        return invariant.totals_from_arrow(data), barriers

    return reader_loop(r, "duckdb", read)


@role("reader_spark")
def reader_spark(r: Role) -> int:
    import spark_plugin as sp

    spark = r.spark()
    client = r.client()
    catalog = r.catalog()

    def figures(df: Any, kind: str | None = None) -> invariant.PerCustomer:
        from pyspark.sql import functions as F

        if kind is not None:
            df = df.where(F.col("kind") == kind)
        return {int(row["customer"]): (int(row["n"]), int(row["s"])) for row in
                df.groupBy("customer").agg(F.count(F.lit(1)).alias("n"),
                                           F.sum("amount").alias("s")).collect()}

    def read() -> tuple[dict[str, Any], dict[str, int]]:
        with sp.consistent_read(spark, list(PIPELINE), client=client, catalog=catalog) as f:
            totals = invariant.sides(
                orders=figures(f[ORDERS]), payments=figures(f[PAYMENTS]),
                batch=figures(f[ORDERS_BY_BATCH]), stream=figures(f[ORDERS_BY_STREAM]),
                ledger_orders=figures(f[LEDGER], LEDGER_ORDER),
                ledger_payments=figures(f[LEDGER], LEDGER_PAYMENT))
            return totals, {name: v.barrier for name, v in f.versions.items()}

    return reader_loop(r, "spark", read)


# -- the command ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m metaservice_soak.roles",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--url", required=True, help="the MetaService base URL")
    parser.add_argument("--token", default="", help="a bearer token ('' for none)")
    parser.add_argument("--state", required=True, help="the soak's state directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spark-master", default=None,
                        help="spark://HOST:PORT of the standalone cluster (default local[1])")
    parser.add_argument("--python", default=None,
                        help="the interpreter Spark's Python workers run (PYSPARK_PYTHON; "
                             "default this one)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: "
                                                      "%(message)s")
    for noisy in ("httpx", "py4j", "spark_plugin"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    r = Role(args)
    r.install_sigterm()
    r.events.write("started", role=r.name, pid=os.getpid())
    try:
        status = ROLES[r.name](r)
    except Exception as exc:  # noqa: BLE001 - noted; the harness restarts the role
        r.error(exc)
        status = 1
    r.events.write("exited", status=status)
    return status


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # Spark's JVM and its threads do not hold the process
