"""The ``metaservice`` streaming sink: one Iceberg commit per barrier, exactly once.

Executors write Parquet data files of the sink table (``write``) and return them in small commit
messages; the driver-side ``commit(messages, batchId)`` then

1. reads Spark's offset log for ``batchId`` (``<checkpointLocation>/offsets/<batchId>``): the
   barrier ``B`` of the job's sources in this micro-batch. The log, written before the batch ran
   and replayed as is after a crash, is what makes a replay commit the same barrier;
2. commits the files as one Iceberg snapshot tagged ``metaservice.job``, ``metaservice.barrier``
   (and the Spark query and batch ids), with the table property
   ``metaservice.sink.<job>.last-barrier`` in the same atomic metadata update
   (``spark_plugin._iceberg.commit_sink``). A replay finds the tagged commit and commits nothing;
3. reports ``(B, snapshot)`` to the service (``POST /commit/...``; exact repeats are
   idempotent). A service that no longer pins ``B`` for the job (the query was stopped and
   restarted in the middle of a batch) is asked to start the job at ``B`` first.
   Through the service's built-in catalog there is no report: the commit of step 2 recorded
   ``B`` in the catalog's transaction (docs/contract.md#the-built-in-catalog); a commit the service
   refuses because ``B`` is no longer pinned is made again after the job is started at ``B``.

So a barrier is committed once whatever the crash point: before the Iceberg commit (Spark replays
the batch and it is committed then), between the Iceberg commit and the report (the replay finds
the commit and only reports it), between the report and Spark's commit log (the replay finds the
commit, the report is an exact repeat).

A micro-batch whose barrier brings no new data is a **heartbeat**: no new snapshot, the sink's
current snapshot is reported at the new barrier (append mode: no rows written; complete mode:
the job's input snapshots did not change, so neither did the result). Through MetaService's
built-in catalog, which records a barrier only by a commit (it refuses such a report), the
barrier gets an empty append snapshot of its own instead, which keeps the sink's rows in either
mode. A micro-batch whose sources
ended at different barriers (Spark asks a query's sources for offsets one after the other, and
a barrier pinned between two of those requests reaches only the later sources) is not a barrier:
its rows are staged in the checkpoint and committed with the next micro-batch, in which the
lagging sources catch up (``checkpoint.py``). A micro-batch that repeats the previous barrier
(the registration batch of a starting query, or one of Spark's no-data batches) commits
nothing; rows it produces in append mode (a watermark that moved without new data) are staged
the same way and committed with the next barrier.

Output modes: append (Iceberg append) and complete (one overwrite snapshot: the whole result
replaces the table in one transaction). Spark itself refuses update mode for this sink
("metaservice does not support Update mode"): an update would need row-level deletes keyed by
the grouping columns, which this sink does not write.

A query whose job has no ``metaservice`` source (e.g. Kafka → Iceberg) runs its job without
sources: each micro-batch with rows is committed at a fresh barrier ``max(now, latest + 1)``,
tagged with the query and batch ids so that a replay finds and reports the same commit.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from spark_plugin._barriers import barrier_after
from spark_plugin._crash_points import crash_point
from spark_plugin._errors import (
    JobNotRunningError,
    SinkCommitConflictError,
    StreamStateError,
    UnknownBarrierError,
    UnknownJobError,
    UnknownTableError,
)
from spark_plugin._executor_tables import TableHandle, write_batches
from spark_plugin._iceberg import (
    BARRIER_PROPERTY,
    JOB_PROPERTY,
    SinkCommit,
    ancestors,
    commit_sink,
    delete_files_quietly,
    last_commit_of,
    load_table,
    records_barriers,
)
from spark_plugin.streaming.checkpoint import (
    JobBatch,
    clear_staged,
    job_batch,
    logged_offsets,
    query_id,
    stage_output,
    staged_output,
)
from spark_plugin.streaming.connections import client_for
from spark_plugin.streaming.lifecycle import remember_query
from spark_plugin.streaming.options import SinkOptions
from spark_plugin.streaming.source import _batch_id

logger = logging.getLogger(__name__)

QUERY_PROPERTY = "metaservice.spark.query-id"
"""Snapshot summary key: the Spark streaming query (its id, stable across restarts)."""
BATCH_PROPERTY = "metaservice.spark.batch-id"
"""Snapshot summary key: the Spark micro-batch that committed the snapshot."""
SOURCES_PROPERTY = "metaservice.source-snapshots"


@dataclass
class SinkFiles(WriterCommitMessage):
    """What one executor task wrote: pyiceberg data files, not committed yet."""

    data_files: list[Any] = field(default_factory=list)
    rows: int = 0


class BarrierStreamWriter(DataSourceStreamArrowWriter):
    """See the module docstring. Created on the driver (planning and commit) and shipped to
    executors, where only ``write`` runs."""

    def __init__(self, options: SinkOptions, overwrite: bool, handle: TableHandle) -> None:
        self.options = options
        self.overwrite = overwrite
        self.handle = handle

    def write(self, iterator: Any) -> SinkFiles:
        crash_point("in_write", _batch_id())
        files, rows = write_batches(self.handle, iterator)
        return SinkFiles(files, rows)

    def commit(self, messages: list[Any], batchId: int) -> None:
        files = [f for m in messages if isinstance(m, SinkFiles) for f in m.data_files]
        MicroBatchCommit(self.options, self.overwrite, files, int(batchId)).run()

    def abort(self, messages: list[Any], batchId: int) -> None:
        files = [f for m in messages if isinstance(m, SinkFiles) for f in m.data_files]
        if files:
            delete_files_quietly(self.handle.open(), [f.file_path for f in files])
        logger.info("sink_batch_aborted", extra={"job": self.options.job, "batch_id": batchId,
                                                 "files": len(files)})


class MicroBatchCommit:
    """The driver side of one micro-batch of the sink (see the module docstring)."""

    def __init__(self, options: SinkOptions, overwrite: bool, data_files: list[Any],
                 batch_id: int) -> None:
        self.options = options
        self.overwrite = overwrite
        self.files = data_files
        self.batch_id = batch_id
        self.client = client_for(options.connection)
        self.table = load_table(options.table, options.catalog)
        # MetaService's built-in catalog records each commit's barrier itself: no report.
        self.recorded_by_commit = records_barriers(self.table, options.connection.url)
        self.timings: dict[str, float] = {}

    def _discard_files(self, files: list[Any] | None = None) -> None:
        paths = [f if isinstance(f, str) else f.file_path
                 for f in (self.files if files is None else files)]
        if paths:
            delete_files_quietly(self.table, paths)

    def run(self) -> None:
        o = self.options
        started = time.perf_counter()
        checkpoint = o.checkpoint_location
        offsets = logged_offsets(checkpoint, self.batch_id)
        if offsets is None:
            raise StreamStateError(
                f"micro-batch {self.batch_id} is not in Spark's offset log under {checkpoint}: "
                "the sink's checkpointLocation option must be the query's checkpoint")
        query = query_id(checkpoint)
        remember_query(query, {off.job for off in offsets} | {o.job}, o.connection.url)
        mine = job_batch(offsets, o.job)
        if mine is None:
            self._commit_without_sources(query)
            return
        previous = job_batch(logged_offsets(checkpoint, self.batch_id - 1), o.job)
        repeated = mine.aligned and (mine.barrier is None or (
            previous is not None and previous.aligned and previous.barrier == mine.barrier))
        if mine.registration or repeated or mine.same_position(previous):
            self._no_new_barrier(mine)
            return
        if not mine.aligned:
            self._stage(mine)
            return
        barrier = mine.barrier
        assert barrier is not None
        staged = [] if self.overwrite else staged_output(checkpoint, o.job, self.batch_id)
        files = [f for _, batch in staged for f in batch] + list(self.files)
        unchanged = (previous is not None and previous.aligned
                     and previous.snapshots == mine.snapshots)
        heartbeat = (not files and not self.overwrite) or (self.overwrite and unchanged)
        crash_point("before_iceberg_commit", self.batch_id)
        snapshot_id = self._heartbeat_snapshot(barrier) if heartbeat else None
        overwrite = self.overwrite
        if snapshot_id is not None and self.recorded_by_commit:
            # The built-in catalog records barriers by its commits only (a report of the
            # current snapshot at a new barrier is refused, 409 held_by_catalog): the barrier
            # gets a snapshot of its own, empty, an append whatever the mode (the sink's rows
            # stay); a replay finds it (``_heartbeat_snapshot``) and commits nothing twice.
            self._discard_files()
            files, overwrite, snapshot_id, heartbeat = [], False, None, False
        if snapshot_id is not None:
            self._discard_files()
        else:
            heartbeat = False
            summary = {SOURCES_PROPERTY: json.dumps(mine.snapshots, sort_keys=True,
                                                    separators=(",", ":")),
                       BATCH_PROPERTY: str(self.batch_id)}
            if query:
                summary[QUERY_PROPERTY] = query
            t0 = time.perf_counter()
            result = self._commit(barrier, files, summary, mine.snapshots, overwrite)
            self.timings["iceberg_ms"] = (time.perf_counter() - t0) * 1000
            if result.already_committed:
                self._discard_files()  # this attempt's files; staged ones are committed
            snapshot_id = result.snapshot_id
        crash_point("after_iceberg_commit", self.batch_id)
        if heartbeat or not self.recorded_by_commit:
            t0 = time.perf_counter()
            self._report(barrier, snapshot_id, sources=mine.snapshots)
            self.timings["report_ms"] = (time.perf_counter() - t0) * 1000
        crash_point("after_report", self.batch_id)
        if staged:
            clear_staged(checkpoint, o.job, self.batch_id)
        self.timings["total_ms"] = (time.perf_counter() - started) * 1000
        logger.info("sink_barrier_committed",
                    extra={"job": o.job, "table": o.table, "barrier": barrier,
                           "snapshot_id": snapshot_id, "batch_id": self.batch_id,
                           "heartbeat": heartbeat, "files": len(files),
                           "staged_batches": [b for b, _ in staged], **self.timings})

    def _no_new_barrier(self, mine: JobBatch) -> None:
        """The registration batch, or one of Spark's no-data batches: nothing to commit now
        (rows of an append are staged for the next barrier)."""
        if self.files and not self.overwrite:
            self._stage(mine)
            return
        self._discard_files()
        logger.info("sink_no_new_barrier", extra={"job": self.options.job,
                                                  "batch_id": self.batch_id})

    def _stage(self, mine: JobBatch) -> None:
        """This batch completes no new barrier (its sources ended at different barriers, or it
        repeats the last one): keep its rows for the next barrier."""
        o = self.options
        if self.overwrite:
            # complete mode: this result is of no barrier; the aligned batch rewrites it whole
            self._discard_files()
        else:
            replaced = stage_output(o.checkpoint_location, o.job, self.batch_id, self.files)
            self._discard_files(replaced)
        logger.info("sink_batch_staged", extra={"job": o.job, "batch_id": self.batch_id,
                                                "barriers": sorted(
                                                    {x.barrier or -1 for x in mine.offsets}),
                                                "files": len(self.files)})

    def _heartbeat_snapshot(self, barrier: int) -> int | None:
        """The snapshot to report for a barrier that brought nothing new: the sink's current
        one (``None`` when the table has no snapshot yet: then an empty one is committed)."""
        self.table.refresh()
        metadata = self.table.metadata
        last = last_commit_of(metadata, self.options.job)
        if last is not None and last.barrier > barrier:
            raise SinkCommitConflictError(
                f"{self.options.table} already holds barrier {last.barrier} of job "
                f"{self.options.job!r}, after barrier {barrier} of micro-batch {self.batch_id}: "
                "the checkpoint is older than the sink")
        if last is not None and last.barrier == barrier and last.snapshot_id is not None:
            return last.snapshot_id
        current = metadata.current_snapshot()
        return None if current is None else current.snapshot_id

    def _commit(self, barrier: int, files: list[Any], summary: dict[str, str],
                sources: dict[str, int], overwrite: bool) -> SinkCommit:
        """The Iceberg commit of ``barrier``. Through the built-in catalog the commit is also
        the report, and is refused as the report would be when the service no longer pins
        ``barrier`` for the job: then the job is started at ``barrier`` and the commit made
        again."""
        o = self.options
        try:
            return commit_sink(self.table, job=o.job, barrier=barrier, data_files=files,
                               overwrite=overwrite, summary=summary)
        except (UnknownBarrierError, JobNotRunningError, UnknownJobError) as exc:
            logger.info("sink_repin", extra={"job": o.job, "barrier": barrier,
                                             "reason": exc.code})
        self._pin(barrier, sources)
        return commit_sink(self.table, job=o.job, barrier=barrier, data_files=files,
                           overwrite=overwrite, summary=summary)

    # -- the service ------------------------------------------------------------------------

    def _report(self, barrier: int, snapshot_id: int, sources: dict[str, int]) -> None:
        o = self.options
        try:
            self.client.commit(o.job, o.table, snapshot_id, barrier)
            return
        except (UnknownBarrierError, JobNotRunningError, UnknownJobError) as exc:
            logger.info("sink_repin", extra={"job": o.job, "barrier": barrier,
                                             "reason": exc.code})
        self._pin(barrier, sources)
        self.client.commit(o.job, o.table, snapshot_id, barrier)

    def _pin(self, barrier: int, sources: dict[str, int]) -> None:
        """Make the service hand ``barrier`` to the job: after a query was stopped in the middle
        of a micro-batch and restarted, Spark replays that batch's barrier, which the service
        no longer pins (or the job was unregistered in between)."""
        o = self.options
        try:
            job = self.client.get_job(o.job)
        except UnknownJobError:
            job = {"state": "terminated"}
        if job.get("state") == "terminated":
            for table in sources:
                self.client.register_source(o.job, table)
            self.client.register_sink(o.job, o.table)
        elif job.get("state") == "running" and job.get("pinned_barrier") not in (None, barrier):
            self.client.abort_barrier(o.job, int(job["pinned_barrier"]),
                                      f"replaying barrier {barrier} of a streaming query")
        self.client.start_job(o.job, barrier)

    def _commit_without_sources(self, query: str | None) -> None:
        """A job without ``metaservice`` sources chooses its barriers (docs/contract.md#start)."""
        o = self.options
        try:
            state = self.client.get_job(o.job).get("state")
        except UnknownJobError:
            state = None
        if state != "running":
            self.client.register_sink(o.job, o.table)
            self.client.start_job(o.job)
        self.table.refresh()
        found = _tagged_commit(self.table.metadata, o.job, query, self.batch_id)
        if found is not None:
            self._discard_files()
            barrier, snapshot_id = found
            if not self.recorded_by_commit:
                self.client.commit(o.job, o.table, snapshot_id, barrier)
            return
        if not self.files and not self.overwrite:
            return
        try:
            latest = self.client.table_barriers(o.table, limit=1).get("latest_barrier")
        except UnknownTableError:
            latest = None
        last = last_commit_of(self.table.metadata, o.job)
        barrier = barrier_after(latest, last.barrier if last else None)
        summary = {BATCH_PROPERTY: str(self.batch_id)}
        if query:
            summary[QUERY_PROPERTY] = query
        crash_point("before_iceberg_commit", self.batch_id)
        result = commit_sink(self.table, job=o.job, barrier=barrier, data_files=self.files,
                             overwrite=self.overwrite, summary=summary)
        crash_point("after_iceberg_commit", self.batch_id)
        if not self.recorded_by_commit:
            self.client.commit(o.job, o.table, result.snapshot_id, barrier)
        crash_point("after_report", self.batch_id)


def _tagged_commit(metadata: Any, job: str, query: str | None,
                   batch_id: int) -> tuple[int, int] | None:
    """``(barrier, snapshot)`` of the commit of ``job`` by this query's micro-batch, if any."""
    if query is None:
        return None
    current = metadata.current_snapshot()
    for snapshot in ancestors(metadata, None if current is None else current.snapshot_id):
        summary = snapshot.summary
        if summary is None or summary.get(JOB_PROPERTY) != job:
            continue
        barrier = summary.get(BARRIER_PROPERTY)
        if (barrier is not None and summary.get(QUERY_PROPERTY) == query
                and summary.get(BATCH_PROPERTY) == str(batch_id)):
            return int(barrier), snapshot.snapshot_id
    return None


__all__ = ["BarrierStreamWriter", "MicroBatchCommit", "SinkFiles"]
