"""The ``metaservice`` streaming source: a micro-batch is one aligned barrier
(docs/contract.md#the-barrier-protocol).

Life cycle of a query's job, as seen by each of its sources (a query may read several tables of
one job: each is a source, and the service pins one barrier per job, so they all agree):

1. **Plan** — ``load()`` registers the source (``MetaServiceDataSource.schema``).
2. **Registration batch** — Spark instantiates a query's sink only when it plans a micro-batch,
   and a job must have all its edges before it starts. So while the job is planned and has no
   sink yet, the first offset request answers an offset that differs from the start offset only
   by ``"registration"``: Spark runs one empty micro-batch, the sink registers while it is
   planned, and nothing is read or committed.
3. **Start** — at the next offset request: ``POST /jobs/{job}/start`` with ``startingBarrier``
   for a query without a checkpoint (``latest`` otherwise: the checkpoint says where the query
   is). A job that is already running (its driver was killed) is not started again: its pinned
   barrier is asked for with ``next``.
4. **Each offset request** — ``next`` with ``after`` = the start offset's barrier. ``process B``
   becomes the end offset ``{"barrier": B, "snapshots": snap(s, B)}``; ``wait`` answers the start
   offset (no micro-batch) and the service is not asked again before ``retry_after_ms``; a pinned
   barrier at or before the start offset (already processed by this query, e.g. after a restart)
   is given back (``abort``) and ``next`` is asked again.
5. **Partitions** — the data files appended between the start and end snapshots of the table
   (the full snapshot when the start has none), planned by pyiceberg on the driver; executors
   read them with pyiceberg's Arrow scan. Nothing on this path needs the service, so a replayed
   micro-batch reads exactly what its logged offsets say.

Admission control: a barrier is the unit of consistency and is never split, so a micro-batch
holds exactly one barrier — the newest one the service offers (barriers that completed while the
query was busy are processed together). ``maxFilesPerTrigger`` is honoured as far as that allows:
it is reported as the default read limit, and a barrier with more files is admitted whole (and
logged). ``Trigger.AvailableNow`` processes up to the newest barrier complete in every source
of the job when the trigger started (at least the first one handed out), then stops.

A source table that is not append-only between two barriers (an overwrite, e.g. the sink of a
complete-mode query) cannot be streamed: ``NotAppendOnlyError`` fails the query with that reason.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from spark_plugin._client import MetaServiceClient
from spark_plugin._crash_points import crash_point
from spark_plugin._errors import (
    JobNotRunningError,
    StreamStateError,
    UnknownBarrierError,
    UnknownJobError,
    UnknownTableError,
)
from spark_plugin._executor_tables import (
    TableHandle,
    arrow_schema_for_spark,
    pack_tasks,
    read_tasks,
)
from spark_plugin._iceberg import (
    ReadPlan,
    load_table,
    plan_appended_read,
    plan_snapshot_read,
    with_fresh_credentials,
)
from spark_plugin._models import Position
from spark_plugin.streaming.connections import client_for
from spark_plugin.streaming.offsets import BarrierOffset
from spark_plugin.streaming.options import SourceOptions

logger = logging.getLogger(__name__)

_MAX_REASKS = 5


class BarrierFilesPartition(InputPartition):
    """Data files of one table to read on an executor (plain, picklable values and pyiceberg
    ``FileScanTask``s), and the row filter the read applies (a batch read's pushed filters;
    ``None``: every row)."""

    def __init__(self, handle: TableHandle, schema_json: str, spark_schema_json: str,
                 tasks: list[Any], row_filter: Any = None) -> None:
        super().__init__(None)
        self.handle = handle
        self.schema_json = schema_json
        self.spark_schema_json = spark_schema_json
        self.tasks = tasks
        self.row_filter = row_filter

    def __repr__(self) -> str:
        return f"BarrierFilesPartition({self.handle.name}, files={len(self.tasks)})"


def read_partition(partition: BarrierFilesPartition) -> Any:
    """The executor side of a read (shared by the streaming and the batch reader)."""
    target = arrow_schema_for_spark(partition.spark_schema_json)
    yield from read_tasks(partition.handle, partition.schema_json, partition.tasks, target,
                          partition.row_filter)


def partitions_of(name: str, table: Any, plan: ReadPlan, schema_json: str,
                  spark_schema_json: str, target_bytes: int,
                  row_filter: Any = None) -> list[BarrierFilesPartition]:
    """Partitions reading the files of ``plan`` of ``table`` (named ``name``) in Python
    workers with pyiceberg's Arrow scan, about ``target_bytes`` each, their rows in the columns
    of ``spark_schema_json`` (those ``row_filter`` keeps, when given)."""
    handle = TableHandle.of(name, table)
    return [BarrierFilesPartition(handle, schema_json, spark_schema_json, group, row_filter)
            for group in pack_tasks(list(plan._tasks), target_bytes)]


class BarrierStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """See the module docstring. Lives in Spark's Python planner process on the driver for the
    whole query run; ``read`` runs on executors."""

    def __init__(self, options: SourceOptions, schema_json: str, spark_schema_json: str) -> None:
        self.options = options
        self.schema_json = schema_json
        self.spark_schema_json = spark_schema_json
        self._running = False
        self._sinkless = False
        self._registration_sent = False
        self._pending: Position | None = None
        self._ask_after = 0.0
        self._available_now = False
        self._target: int | None = None
        self._table: Any = None

    # -- the service ------------------------------------------------------------------------

    @property
    def _client(self) -> MetaServiceClient:
        return client_for(self.options.connection)

    def _job_state(self) -> dict[str, Any]:
        o = self.options
        try:
            job = self._client.get_job(o.job)
        except UnknownJobError:
            job = None
        if job is None or job.get("state") == "terminated" or o.table not in job.get("sources",
                                                                                      []):
            self._client.register_source(o.job, o.table)
            job = self._client.get_job(o.job)
        return job

    def _ensure_running(self, start: BarrierOffset) -> BarrierOffset | None:
        """Start the job if it does not run yet. Returns the offset to answer right away (the
        registration batch), or ``None`` when the job runs and ``next`` may be asked."""
        if self._running:
            return None
        o = self.options
        job = self._job_state()
        has_sinks = bool(job.get("sinks"))
        if job.get("state") == "running":
            self._running, self._sinkless = True, not has_sinks
            logger.info("stream_job_resumed", extra={"job": o.job, "table": o.table,
                                                     "run": job.get("run")})
            return None
        if not has_sinks and not self._registration_sent:
            self._registration_sent = True
            logger.info("stream_registration_batch", extra={"job": o.job, "table": o.table})
            return start.next_registration()
        start_from: str | int = o.starting_barrier if start.barrier is None else "latest"
        position = self._client.start_job(o.job, start_from)
        self._running, self._sinkless = True, not has_sinks
        self._pending = position if position.action in ("process", "abort") else None
        if position.action == "wait":
            self._ask_after = time.monotonic() + (position.retry_after_ms or 500) / 1000
        logger.info("stream_job_started", extra={"job": o.job, "run": position.run,
                                                 "action": position.action,
                                                 "barrier": position.barrier,
                                                 "from": start_from})
        return None

    def _ask(self, after: int | None) -> Position:
        if self._pending is not None:
            position, self._pending = self._pending, None
            return position
        try:
            return self._client.next_barrier(self.options.job, after)
        except JobNotRunningError:
            # unregistered under us (e.g. a listener of an earlier run): plan and start again
            self._running = False
            raise

    # -- Spark's interface ----------------------------------------------------------------

    def initialOffset(self) -> dict:
        return BarrierOffset.initial(self.options.job).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_files_per_trigger:
            return ReadMaxFiles(self.options.max_files_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Process what is available now: up to the newest barrier complete in every source of
        the job at this moment (at least the first barrier the job is handed)."""
        self._available_now = True
        self._target = self._latest_aligned()

    def _latest_aligned(self) -> int | None:
        try:
            sources = self._client.get_job(self.options.job).get("sources") or []
            latests = [self._client.table_barriers(t, limit=1).get("latest_barrier")
                       for t in sources]
        except (UnknownJobError, UnknownTableError):
            return None
        known = [int(b) for b in latests if b is not None]
        if not known or len(known) < len(latests):
            return None
        return min(known)

    def _pinned_after(self, barrier: int) -> bool:
        pinned = self._client.get_job(self.options.job).get("pinned_barrier")
        return pinned is not None and int(pinned) > barrier

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._given_back()
        begin = BarrierOffset.from_json(start)
        if (self._available_now and self._target is not None and begin.barrier is not None
                and begin.barrier >= self._target and not self._pinned_after(begin.barrier)):
            # done, unless another source of the job was handed a later barrier: then follow
            # it, so that every source ends at the same barrier
            return start
        if not self._available_now and time.monotonic() < self._ask_after:
            return start
        try:
            early = self._ensure_running(begin)
            if early is not None:
                return early.to_json()
            end = self._next_end(begin)
        except JobNotRunningError:
            end = None
        if end is None:
            return start
        if self._available_now:
            self._target = max(self._target if self._target is not None else -1,
                               end.barrier if end.barrier is not None else -1)
        self._check_limit(begin, end, limit)
        crash_point("after_offset")
        return end.to_json()

    def _next_end(self, begin: BarrierOffset) -> BarrierOffset | None:
        o = self.options
        for _ in range(_MAX_REASKS):
            position = self._ask(begin.barrier)
            if position.action == "wait":
                self._ask_after = time.monotonic() + (position.retry_after_ms or 500) / 1000
                return None
            if position.action == "abort":
                logger.warning("stream_barrier_invalidated",
                               extra={"job": o.job, "barrier": position.barrier,
                                      "reason": position.reason})
                continue
            if position.action != "process":
                raise StreamStateError(f"job {o.job!r} has no sources on the service "
                                       f"(answer {position.action!r}); was it registered again "
                                       "with other edges?")
            assert position.barrier is not None
            if begin.barrier is not None and position.barrier <= begin.barrier:
                if (position.barrier == begin.barrier
                        and not self._committed_by_sinks(position.barrier)):
                    # This source has read it; another source of the job has not yet (it was
                    # pinned between their offset requests). The sink commits it once they meet.
                    return None
                # Pinned before this query's checkpoint moved past it (a restart): give it back.
                with contextlib.suppress(UnknownBarrierError):
                    self._client.abort_barrier(o.job, position.barrier,
                                               "already processed by this streaming query")
                continue
            if o.table not in position.snapshots:
                raise StreamStateError(f"the service's barrier {position.barrier} for job "
                                       f"{o.job!r} has no snapshot of {o.table}")
            return BarrierOffset(o.job, position.barrier, position.snapshots)
        return None

    def _committed_by_sinks(self, barrier: int) -> bool:
        """Every sink of the job already holds ``barrier`` (or the job has no sink)."""
        for sink in self._client.get_job(self.options.job).get("sinks") or []:
            try:
                latest = self._client.table_barriers(sink, limit=1).get("latest_barrier")
            except UnknownTableError:
                return False
            if latest is None or int(latest) < barrier:
                return False
        return True

    def _check_limit(self, begin: BarrierOffset, end: BarrierOffset, limit: ReadLimit) -> None:
        if not isinstance(limit, ReadMaxFiles):
            return
        files = len(self._plan(begin, end))
        if files > limit.max_files:
            logger.info("stream_barrier_over_limit",
                        extra={"job": self.options.job, "barrier": end.barrier, "files": files,
                               "max_files": limit.max_files})

    def _plan(self, begin: BarrierOffset, end: BarrierOffset) -> list[Any]:
        partitions = self.partitions(begin.to_json(), end.to_json())
        # pyspark types them as InputPartition; partitions() above returns ours, with tasks
        return [t for p in partitions for t in p.tasks]  # type: ignore[attr-defined]

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        planned = self.plan_between(start, end, allow_native=False)
        if planned is None:
            return []
        table, plan = planned
        return list(partitions_of(self.options.table, table, plan, self.schema_json,
                                  self.spark_schema_json, self.options.max_partition_bytes))

    def plan_between(self, start: dict, end: dict, *,
                     allow_native: bool) -> tuple[Any, ReadPlan] | None:
        """The table (with fresh credentials) and the read plan of what the source reads between
        two offsets; ``None`` when it reads nothing (the same barrier, a registration batch, an
        unchanged snapshot)."""
        begin, finish = BarrierOffset.from_json(start), BarrierOffset.from_json(end)
        table_name = self.options.table
        if finish.barrier is None or finish.barrier == begin.barrier:
            return None
        to_snapshot = finish.snapshots.get(table_name)
        if to_snapshot is None:
            raise StreamStateError(f"offset of barrier {finish.barrier} has no snapshot of "
                                   f"{table_name}")
        from_snapshot = begin.snapshots.get(table_name)
        if from_snapshot == to_snapshot:
            return None
        if self._table is None:
            self._table = load_table(table_name, self.options.catalog)
        # the partitions carry the table's credentials to the executors: renewed before they end
        table = with_fresh_credentials(self._table)
        if table.metadata.snapshot_by_id(to_snapshot) is None:
            table.refresh()
        if from_snapshot is None:
            return table, plan_snapshot_read(table, to_snapshot, allow_native=allow_native)
        return table, plan_appended_read(table, from_snapshot, to_snapshot,
                                         allow_native=allow_native)

    def read(self, partition: InputPartition) -> Any:
        crash_point("in_read", _batch_id())
        # Spark hands back a partition partitions() made (ours); pyspark types the base class
        return read_partition(partition)  # type: ignore[arg-type]

    def commit(self, end: dict) -> None:
        crash_point("source_commit")
        offset = BarrierOffset.from_json(end)
        if self._sinkless and offset.barrier is not None and not offset.registration:
            # A job read into a sink that is not ``metaservice`` never commits its barriers:
            # give each back once read, so that the next one can be handed out. Spark commits a
            # batch's sources while it starts the next batch: the call runs beside that batch,
            # and the next offset request waits for it (the service is in the same state as if
            # it had been made here).
            _giving_back[self] = _background().submit(self._give_back, offset.barrier)

    def _give_back(self, barrier: int) -> None:
        with contextlib.suppress(UnknownBarrierError, JobNotRunningError):
            self._client.abort_barrier(self.options.job, barrier,
                                       "read by a query without a metaservice sink")

    def _given_back(self) -> None:
        """Wait for the barrier given back at the last commit, if any; a failure is logged (the
        next offset request gives a barrier already read back itself)."""
        pending = _giving_back.pop(self, None)
        if pending is None:
            return
        try:
            pending.result()
        except Exception:  # noqa: BLE001 - logged; the protocol recovers at the next request
            logger.warning("stream_barrier_not_given_back", exc_info=True,
                           extra={"job": self.options.job})

    def stop(self) -> None:
        self._given_back()


# Barriers being given back, per reader (not an attribute: Spark pickles the reader to its
# Python workers, and a future does not pickle).
_giving_back: weakref.WeakKeyDictionary[BarrierStreamReader, Future[None]] = (
    weakref.WeakKeyDictionary())


@functools.cache
def _background() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="metaservice-give-back")


def _batch_id() -> int | None:
    """The micro-batch a task belongs to (Spark's local property), if known."""
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        value = context.getLocalProperty("streaming.sql.batchId") if context else None
        return None if value is None else int(value)
    except Exception:  # noqa: BLE001 - only used by the test hook
        return None
