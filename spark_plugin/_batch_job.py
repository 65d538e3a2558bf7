"""A Spark batch job that processes aligned barriers (docs/contract.md#the-barrier-protocol), one
step at a time.

Life cycle::

    BarrierJob(...)          plan: registers every source and sink (idempotent)
    with job:                start: the job runs; the server pins its start position
        step = job.next()    process → a BarrierStep; wait → None; abort → discarded, asked again
        step.read(t) / step.read_changes(t) / step.write(t, df)
        step.commit()        one Iceberg commit per sink, then one report per sink (none through
                         MetaService's built-in catalog: its commits record the barrier)
    (exit)                   an open step is aborted; the job is unregistered

Three ways to drive it: ``job.next()`` (one answer, ``None`` on ``wait``), ``job.wait_next()``
(sleeps until a step comes) and ``for step in job.available():`` (every barrier available when
the loop starts, then the loop ends: a batch run, as Spark's ``Trigger.AvailableNow``).

Guarantees:

- ``step.read(t)`` returns exactly the snapshot the service pinned for barrier B;
  ``step.read_changes(t)`` exactly the rows appended between the pinned previous snapshot and
  it, or raises :class:`~spark_plugin.NotAppendOnlyError` when that would be wrong.
- ``step.commit()`` commits every sink exactly once for B, also across crashes: each sink
  commit carries ``metaservice.job``/``metaservice.barrier`` and the table property
  ``metaservice.sink.<job>.last-barrier`` in the same atomic Iceberg commit; a replay of B (the
  server hands a pinned barrier out again after a crash) finds it and only reports it.
- Through MetaService's built-in catalog (the default when no other catalog is configured,
  ``spark_plugin._iceberg.catalogs``) each sink commit records B in the catalog's own
  transaction, so there is nothing to report and no window between commit and report.
- A sink that was not written in a step still gets a (empty) snapshot for B, so every sink
  completes every barrier.

A step whose answer has no previous barrier is *full* (``step.is_full``,
docs/contract.md#the-spark-plugin): a new job's first step, or a restart the service answers from
``latest``, ``earliest`` or an explicit barrier. ``read_changes`` then returns the full snapshots,
and the step *replaces* the contents of every sink, whatever the write mode: the first ``write`` to
a sink in a full step overwrites it (later writes of the step append to that), and a sink not
written gets an empty snapshot. So running a job again never duplicates rows. Later steps
(``previous`` set) are incremental: with ``mode="append"`` their rows are added to what the sink
holds.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from spark_plugin import _runtime_io
from spark_plugin._barriers import barrier_after
from spark_plugin._client import MetaServiceClient, client_or_default
from spark_plugin._crash_points import crash_point
from spark_plugin._errors import SinkCommitConflictError, UnknownTableError
from spark_plugin._iceberg import (
    BARRIER_PROPERTY,
    JOB_PROPERTY,
    SinkCommit,
    barrier_committed,
    commit_sink,
    delete_files_quietly,
    last_commit_of,
    load_table,
    plan_appended_read,
    plan_snapshot_read,
    records_barriers,
    resolve_catalog,
    with_fresh_credentials,
)
from spark_plugin._models import Commit, Position
from spark_plugin._names import TableName, validate_job_id

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

WriteMode = Literal["append", "overwrite"]


@dataclass
class _PendingSink:
    overwrite: bool = False
    files: list[DataFile] = field(default_factory=list)
    # through Iceberg's runtime (``_runtime_io``): the frames, written by the commit itself
    frames: list[DataFrame] = field(default_factory=list)


class BarrierStep:
    """The work of one job for one barrier ``B``: what to read, what was written.

    Attributes:
        job: the job id.
        barrier: ``B``.
        snapshots: per source, the snapshot completing ``B`` (``snap(s, B)``).
        previous: per source, the snapshot at the previous barrier; ``None`` in a full step
            (the answer named no previous barrier).
        state: ``"open"``, ``"committed"`` or ``"aborted"``.
    """

    def __init__(self, job: BarrierJob, barrier: int, snapshots: dict[str, int],
                 previous: dict[str, int] | None) -> None:
        self._job = job
        self.job = job.job
        self.barrier = barrier
        self.snapshots = dict(snapshots)
        # ``None``: no previous barrier. Servers before ``previous: null`` answered a start
        # position with ``{}`` or nothing. A job without sources (no snapshots) writes its own
        # data barrier after barrier: its steps are never full.
        self.previous = (None if previous is None or (not previous and self.snapshots)
                         else dict(previous))
        self.state: Literal["open", "committed", "aborted"] = "open"
        self._pending: dict[str, _PendingSink] = {}
        self.commits: dict[str, Commit] = {}

    def __repr__(self) -> str:
        return f"BarrierStep(job={self.job!r}, barrier={self.barrier}, state={self.state!r})"

    @property
    def is_full(self) -> bool:
        """True when the answer had no previous barrier: the sources are read in full and the
        step replaces its sinks' contents whatever the write mode
        (docs/contract.md#the-spark-plugin)."""
        return self.previous is None

    @property
    def is_initial(self) -> bool:
        """The former name of :attr:`is_full`."""
        return self.is_full

    # -- reading ------------------------------------------------------------------------------

    def _source(self, table: str | TableName) -> tuple[str, int]:
        name = str(TableName.parse(table))
        if name not in self.snapshots:
            raise ValueError(f"{name} is not a source of job {self.job!r} "
                             f"(sources: {sorted(self.snapshots)})")
        return name, self.snapshots[name]

    def read(self, table: str | TableName) -> DataFrame:
        """The full content of source ``table`` at ``B`` (the snapshot the service pinned)."""
        from spark_plugin._spark_io import dataframe_from_plan

        name, snapshot_id = self._source(table)
        if self._job._through_runtime(name):
            return _runtime_io.read_snapshot(self._job.spark, name, snapshot_id)
        tbl = self._job._table(name)
        return dataframe_from_plan(self._job.spark, tbl, plan_snapshot_read(tbl, snapshot_id))

    def read_changes(self, table: str | TableName) -> DataFrame:
        """The rows appended to source ``table`` after the previous barrier, up to ``B``.

        In a full step (:attr:`is_full`), or for a source that had no snapshot at the previous
        barrier, this is the full content at ``B``.

        Raises:
            NotAppendOnlyError: a snapshot in between overwrote, deleted or rewrote data, or the
                previous snapshot is not an ancestor (rollback): read the full snapshot instead.
        """
        from spark_plugin._spark_io import dataframe_from_plan

        name, snapshot_id = self._source(table)
        previous = None if self.previous is None else self.previous.get(name)
        if previous is None:
            return self.read(name)
        tbl = self._job._table(name)
        if self._job._through_runtime(name):
            return _runtime_io.read_appended(self._job.spark, name, tbl, previous, snapshot_id)
        plan = plan_appended_read(tbl, previous, snapshot_id)
        return dataframe_from_plan(self._job.spark, tbl, plan)

    # -- writing ------------------------------------------------------------------------------

    def _require_open(self) -> None:
        if self.state != "open":
            raise RuntimeError(f"step for barrier {self.barrier} is {self.state}")

    def write(self, table: str | TableName, df: DataFrame, mode: WriteMode = "append") -> None:
        """Write ``df`` to sink ``table`` for this barrier (data files now, commit later).

        ``mode="overwrite"`` makes the sink's snapshot for ``B`` hold only what this step writes
        (earlier writes of this step to the same sink are discarded); ``"append"`` adds to it.
        In a full step (:attr:`is_full`) the sink's snapshot for ``B`` holds only what this step
        writes whatever the mode: the first write replaces the sink's contents, and an
        ``"append"`` after it adds to what this step wrote. Several writes to one sink are
        committed together as one snapshot.
        """
        from spark_plugin._spark_io import write_data_files

        self._require_open()
        if mode not in ("append", "overwrite"):
            raise ValueError("mode must be 'append' or 'overwrite'")
        name = str(TableName.parse(table))
        if name not in self._job.sinks:
            raise ValueError(f"{name} is not a sink of job {self.job!r} "
                             f"(sinks: {list(self._job.sinks)})")
        pending = self._pending.setdefault(name, _PendingSink(overwrite=self.is_full))
        if self._job._through_runtime(name):
            if mode == "overwrite":
                pending.frames, pending.overwrite = [], True
            pending.frames.append(df)
            return
        tbl = self._job._table(name)
        files = write_data_files(self._job.spark, df, tbl)
        if mode == "overwrite":
            delete_files_quietly(tbl, [f.file_path for f in pending.files])
            pending.files, pending.overwrite = [], True
        pending.files.extend(files)

    def commit(self) -> dict[str, Commit]:
        """Commit ``B`` to every sink (one Iceberg snapshot each), then report each commit
        (except those made through MetaService's built-in catalog, which recorded ``B`` as they
        were committed).

        Safe to call again after a failure (for example a lost report): sinks already holding
        ``B`` are not committed again, and reports are idempotent. In a full step every sink's
        snapshot holds only what the step wrote (a sink not written is emptied).

        Returns:
            Per sink, the commit recorded by the service.
        """
        self._require_open()
        lineage = json.dumps(self.snapshots, sort_keys=True, separators=(",", ":"))
        done: dict[str, SinkCommit] = {}
        for sink in self._job.sinks:
            pending = self._pending.get(sink, _PendingSink(overwrite=self.is_full))
            tbl = self._job._table(sink)
            if self._job._through_runtime(sink):
                result = self._commit_through_runtime(sink, tbl, pending, lineage)
            else:
                result = commit_sink(tbl, job=self.job, barrier=self.barrier,
                                     data_files=pending.files, overwrite=pending.overwrite,
                                     summary={"metaservice.source-snapshots": lineage})
                if result.already_committed:
                    delete_files_quietly(tbl, [f.file_path for f in pending.files])
            pending.files, pending.frames = [], []
            done[sink] = result
            crash_point("after_sink_commit")
        for sink, result in done.items():
            if records_barriers(self._job._table(sink), self._job.client.base_url):
                self.commits[sink] = Commit(sink, self.barrier, result.snapshot_id)
            else:
                self.commits[sink] = self._job.client.commit(self.job, sink,
                                                             result.snapshot_id, self.barrier)
        self.state = "committed"
        self._job._committed(self)
        logger.info("step_committed", extra={"job": self.job, "barrier": self.barrier})
        return dict(self.commits)

    def _commit_through_runtime(self, sink: str, tbl: Table, pending: _PendingSink,
                                lineage: str) -> SinkCommit:
        """The sink's commit of ``B`` as one write of Iceberg's runtime, unless the sink holds
        ``B`` already (a step replayed after a crash): then that commit."""
        tbl.refresh()
        found = barrier_committed(tbl.metadata, sink, self.job, self.barrier)
        replayed = found is not None
        if not replayed:
            _runtime_io.write_commit(
                self._job.spark, sink, pending.frames, replace=pending.overwrite,
                properties={JOB_PROPERTY: self.job, BARRIER_PROPERTY: str(self.barrier),
                            "metaservice.source-snapshots": lineage})
            tbl.refresh()
            found = barrier_committed(tbl.metadata, sink, self.job, self.barrier)
        if found is None or found.snapshot_id is None:
            raise SinkCommitConflictError(
                f"{sink}: Iceberg's runtime committed no snapshot of barrier {self.barrier}")
        if replayed:
            logger.info("sink_commit_replayed", extra={"table": sink, "job": self.job,
                                                        "barrier": self.barrier,
                                                        "snapshot_id": found.snapshot_id})
        return SinkCommit(sink, self.job, self.barrier, found.snapshot_id, replayed)

    def abort(self, reason: str = "") -> None:
        """Give barrier ``B`` back to the service (it will be handed out again) and drop the
        data files written for it."""
        if self.state != "open":
            return
        self._discard()
        self._job.client.abort_barrier(self.job, self.barrier, reason)
        self.state = "aborted"
        self._job._aborted(self)

    def _discard(self) -> None:
        for sink, pending in self._pending.items():
            delete_files_quietly(self._job._table(sink), [f.file_path for f in pending.files])
        self._pending.clear()


class BarrierJob:
    """A batch job processing aligned barriers; see the module docstring.

    Args:
        spark: the session.
        job: the job id (``^[A-Za-z0-9_.:-]{1,200}$``), stable across restarts.
        sources: tables read, ``catalog.database.table``.
        sinks: tables written.
        client: the MetaService client (default: from ``$METASERVICE_URL``).
        catalog: a pyiceberg catalog, a :class:`~spark_plugin.CatalogSpec`, a mapping of
            names to either, or ``None``: found by name in Spark's configuration, then
            pyiceberg's, else MetaService's built-in catalog (``<client url>/iceberg``).
        start_from: where :meth:`start` begins (docs/contract.md#start): ``"resume"``, ``"latest"``,
            ``"earliest"`` or a barrier; ``None`` (default) leaves it to the service, whose
            default continues a job after the barriers its sinks already hold.

    Registers every source and sink when constructed (plan time).
    """

    def __init__(
        self,
        spark: SparkSession,
        job: str,
        sources: Iterable[str | TableName] = (),
        sinks: Iterable[str | TableName] = (),
        *,
        client: MetaServiceClient | None = None,
        catalog: Any = None,
        start_from: str | int | None = None,
    ) -> None:
        self.spark = spark
        self.job = validate_job_id(job)
        self.sources = tuple(dict.fromkeys(str(TableName.parse(t)) for t in sources))
        self.sinks = tuple(dict.fromkeys(str(TableName.parse(t)) for t in sinks))
        if not self.sinks:
            raise ValueError("a BarrierJob needs at least one sink")
        self.client = client_or_default(client)
        self.catalog = catalog
        self.start_from = start_from
        for t in (*self.sources, *self.sinks):  # fail fast on a wrong catalog
            resolve_catalog(TableName.parse(t), catalog, spark=spark, client=self.client)
        self._tables: dict[str, Table] = {}
        self._runtime_tables: dict[str, bool] = {}
        self._pending_position: Position | None = None
        self._step: BarrierStep | None = None
        self._started = False
        self.last_committed_barrier: int | None = None
        self.retry_after_ms: int | None = None
        self.run: int | None = None
        for t in self.sources:
            self.client.register_source(self.job, t)
        for t in self.sinks:
            self.client.register_sink(self.job, t)
        logger.info("job_planned", extra={"job": self.job, "sources": self.sources,
                                          "sinks": self.sinks})

    def __repr__(self) -> str:
        return f"BarrierJob({self.job!r}, sources={self.sources}, sinks={self.sinks})"

    def _through_runtime(self, name: str) -> bool:
        """Whether this session reads and writes ``name`` through Iceberg's own Spark runtime
        (``_runtime_io``): its catalog is Iceberg's ``SparkCatalog`` in the session."""
        found = self._runtime_tables.get(name)
        if found is None:
            found = self._runtime_tables[name] = _runtime_io.served_by_runtime(self.spark, name)
        return found

    def _table(self, name: str) -> Table:
        """``name``'s table, loaded once per job object and again when its vended credentials
        are about to end (a job object lives across steps, and idles between them)."""
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = load_table(name, self.catalog, spark=self.spark,
                                                    client=self.client)
        return with_fresh_credentials(table)

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> BarrierJob:
        """Start the job (idempotent on the server: a running job gets its pinned position)."""
        position = self.client.start_job(self.job, self.start_from)
        self._started = True
        self.run = position.run
        self._pending_position = position if position.action in ("process", "abort") else None
        if position.action == "wait":
            self.retry_after_ms = position.retry_after_ms
        if position.action == "none":
            self._recover_sourceless()
        logger.info("job_started", extra={"job": self.job, "run": self.run,
                                          "action": position.action,
                                          "barrier": position.barrier})
        return self

    def close(self, reason: str | None = None) -> None:
        """Abort an open step (with ``reason``) and unregister the job."""
        try:
            if self._step is not None and self._step.state == "open":
                self._step.abort(reason or "job closed before commit")
        finally:
            self.client.unregister(self.job)
            self._started = False
            logger.info("job_unregistered", extra={"job": self.job})

    def __enter__(self) -> BarrierJob:
        return self.start()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close(f"{type(exc).__name__}: {exc}"[:500])
        except Exception:  # noqa: BLE001 - the original exception matters more
            logger.warning("job_close_failed", extra={"job": self.job}, exc_info=True)

    # -- barriers -----------------------------------------------------------------------------

    def next(self) -> BarrierStep | None:
        """The step for the next aligned barrier, or ``None`` while the answer is ``wait``
        (``retry_after_ms`` says when to ask again). An open step is returned again until it is
        committed or aborted. A barrier invalidated upstream (``abort``) is discarded and the
        service is asked again."""
        if not self._started:
            raise RuntimeError("start the job first (use it as a context manager)")
        if self._step is not None and self._step.state == "open":
            return self._step
        position = self._pending_position or self.client.next_barrier(
            self.job, self.last_committed_barrier)
        self._pending_position = None
        for _ in range(10):
            if position.action == "process" and position.barrier is not None:
                barrier = position.barrier
                if (self.last_committed_barrier is not None
                        and barrier <= self.last_committed_barrier):
                    # Already committed by this job: give the pin back and ask again.
                    self.client.abort_barrier(self.job, barrier, "already committed")
                    position = self.client.next_barrier(self.job, self.last_committed_barrier)
                    continue
                self._step = BarrierStep(self, barrier, position.snapshots, position.previous)
                self.retry_after_ms = None
                logger.info("step_started", extra={"job": self.job, "barrier": barrier,
                                                   "initial": self._step.is_initial})
                return self._step
            if position.action == "abort":
                logger.info("barrier_invalidated", extra={"job": self.job,
                                                          "barrier": position.barrier,
                                                          "reason": position.reason})
                if self._step is not None and self._step.barrier == position.barrier:
                    self._step._discard()
                    self._step.state = "aborted"
                position = self.client.next_barrier(self.job, self.last_committed_barrier)
                continue
            if position.action == "none":
                self._step = self._sourceless_step()
                return self._step
            self.retry_after_ms = position.retry_after_ms
            return None
        raise RuntimeError(f"job {self.job!r}: the service keeps answering {position.action}")

    def wait_next(self, timeout_seconds: float | None = None) -> BarrierStep | None:
        """Like :meth:`next`, sleeping ``retry_after_ms`` between answers, until a step comes or
        ``timeout_seconds`` pass (then ``None``)."""
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        while True:
            step = self.next()
            if step is not None:
                return step
            delay = (self.retry_after_ms or 500) / 1000
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                delay = min(delay, remaining)
            time.sleep(delay)

    def available(self) -> Iterator[BarrierStep]:
        """The steps for every barrier available now, one after the other, then the end (a batch
        run, as Spark's ``Trigger.AvailableNow``)::

            with BarrierJob(...) as job:
                for step in job.available():
                    step.write(sink, transform(step.read_changes(source)))
                    step.commit()

        "Available" is fixed when the loop starts: the loop ends once a step reaching the newest
        barrier any source had then is committed, or as soon as the service answers ``wait``
        (nothing more is exact in every source), so data arriving meanwhile is left for the next
        run. A job without sources gets one step. Each step must be committed or aborted before
        the loop goes on; aborting one ends the loop (its barrier is handed out again later).

        Raises:
            RuntimeError: a step was left open, or the job was not started.
        """
        if not self._started:
            raise RuntimeError("start the job first (use it as a context manager)")
        bound = None
        for source in self.sources:
            try:
                latest = self.client.table_barriers(source, limit=1).get("latest_barrier")
            except UnknownTableError:
                latest = None
            if latest is not None:
                bound = int(latest) if bound is None else max(bound, int(latest))
        if self.sources and bound is None:
            return
        while True:
            step = self.next()
            if step is None:
                return
            yield step
            if step.state == "open":
                raise RuntimeError(f"step for barrier {step.barrier} was left open: commit or "
                                   "abort every step of job.available()")
            if (step.state == "aborted" or not self.sources
                    or (bound is not None and step.barrier >= bound)):
                return

    def _recover_sourceless(self) -> int:
        """For a job without sources: report each sink commit of this job that reached Iceberg
        but was never recorded (a crash before the report). Returns the greatest barrier known
        for any sink (service or Iceberg), -1 if none."""
        floor = -1
        for sink in self.sinks:
            table = self._table(sink)
            table.refresh()
            last = last_commit_of(table.metadata, self.job)
            try:
                latest = self.client.table_barriers(sink, limit=1).get("latest_barrier")
            except UnknownTableError:
                latest = None
            if (last is not None and last.snapshot_id is not None
                    and (latest is None or last.barrier > int(latest))):
                self.client.commit(self.job, sink, last.snapshot_id, last.barrier)
                latest = last.barrier
                logger.info("sink_commit_recovered", extra={"job": self.job, "table": sink,
                                                            "barrier": last.barrier})
            for b in (None if last is None else last.barrier, latest):
                if b is not None:
                    floor = max(floor, int(b))
        return floor

    def _sourceless_step(self) -> BarrierStep:
        """A job without sources chooses its barrier: ``max(now_ms, latest + 1)`` over its sinks
        (as the service and its Iceberg commits know them)."""
        return BarrierStep(self, barrier_after(self._recover_sourceless(),
                                              self.last_committed_barrier), {}, {})

    # -- hooks of the step ----------------------------------------------------------------------

    def _committed(self, step: BarrierStep) -> None:
        self.last_committed_barrier = step.barrier

    def _aborted(self, step: BarrierStep) -> None:
        pass
