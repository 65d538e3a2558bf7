"""Commits: data files of a table, and one tagged commit per barrier, exactly once.

``commit_sink`` makes one Iceberg snapshot per call, whose summary carries ``metaservice.job``
(or, for root ingestion, ``metaservice.root-label``) and ``metaservice.barrier``, in the same
metadata update as the table property ``metaservice.sink.<job>.last-barrier`` (``markers.py``).
Before committing, and again before any retry, the table is checked for a commit of the same job
and barrier on its current lineage; when one is found nothing is committed and that snapshot is
returned. So a replay after a crash, or a zombie writer racing the new one, never commits a
barrier twice.

Through MetaService's built-in catalog the commit also records the barrier, in the catalog's
own transaction (docs/contract.md#the-built-in-catalog). A commit the service refuses there (a
barrier not handed to the job, a table written by another job, ...) raises the plugin's error for
the service's code instead of being retried as a conflict.
"""

from __future__ import annotations

import logging
import re
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_plugin._errors import APIError, SinkCommitConflictError, error_from_response
from spark_plugin._iceberg.catalogs import qualified_name
from spark_plugin._iceberg.markers import (
    BARRIER_PROPERTY,
    JOB_PROPERTY,
    ROOT_LABEL_PROPERTY,
    LastCommit,
    last_commit_of,
    marker_property,
)
from spark_plugin._names import validate_job_id

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

logger = logging.getLogger(__name__)

def data_location(table: Table) -> str:
    """Where new data files of ``table`` go (``write.data.path`` or ``<location>/data``)."""
    props = table.metadata.properties
    return props.get("write.data.path") or f"{table.location().rstrip('/')}/data"


def data_files_from_parquet(table: Table, paths: Sequence[str]) -> list[DataFile]:
    """Describe Parquet files already written into the table's location as Iceberg data files
    (statistics, partition) after checking them against the table's current schema. The
    footers are read in parallel (on an object store, one request each), in pyiceberg's
    worker pool."""
    import pyarrow.parquet as pq
    from pyiceberg.utils.concurrent import ExecutorFactory

    def described(path: str) -> DataFile:
        found = table.io.new_input(path)
        with found.open() as stream:
            footer = pq.read_metadata(stream)
        return _described_data_file(table, path, len(found), footer)

    if len(paths) <= 1:
        return [described(p) for p in paths]
    return list(ExecutorFactory.get_or_create().map(described, paths))


def data_files_from_footers(table: Table,
                            files: Iterable[tuple[str, int, bytes]]) -> list[DataFile]:
    """Describe Parquet files written into the table's location from what their writer kept:
    each file's path, size and end from its metadata on (the Thrift metadata, its length and
    ``PAR1``), without reading the files back."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return [_described_data_file(table, path, size,
                                pq.read_metadata(pa.BufferReader(b"PAR1" + footer)))
            for path, size, footer in files]


def _described_data_file(table: Table, path: str, size: int, footer: Any) -> DataFile:
    """The data file at ``path`` of ``size`` bytes whose Parquet metadata is ``footer``,
    checked against the table's current schema (as pyiceberg's ``parquet_file_to_data_file``,
    from metadata already at hand)."""
    from pyiceberg.io.pyarrow import (
        _check_pyarrow_schema_compatible,
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    metadata = table.metadata
    schema = metadata.schema()
    _check_pyarrow_schema_compatible(schema, footer.schema.to_arrow_schema(),
                                     format_version=metadata.format_version)
    columns = parquet_path_to_id_mapping(schema)
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=columns)
    described = statistics.to_serialized_dict()
    for field_id in _columns_without_bounds(footer, columns):
        described["lower_bounds"].pop(field_id, None)
        described["upper_bounds"].pop(field_id, None)
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=statistics.partition(metadata.spec(), schema), file_size_in_bytes=size,
        sort_order_id=None, spec_id=metadata.default_spec_id, equality_ids=None,
        key_metadata=None, **described)


def _columns_without_bounds(footer: Any, columns: dict[str, int]) -> set[int]:
    """The field ids of the columns that hold values in a row group whose statistics have no
    min and max. A Parquet writer leaves them out for values over 4 KiB (parquet-mr and Arrow
    alike), and pyiceberg (0.12) then takes the file's bounds from the other row groups alone:
    bounds that rule out rows the file holds, and an engine that prunes by them loses those
    rows. Such a column gets no bounds, as Iceberg's own writers do (apache/iceberg#8559)."""
    unbounded: set[int] = set()
    for group in range(footer.num_row_groups):
        for index in range(footer.num_columns):
            chunk = footer.row_group(group).column(index)
            stats = chunk.statistics if chunk.is_stats_set else None
            if stats is not None and stats.has_min_max:
                continue
            if stats is not None and stats.has_null_count and stats.null_count >= chunk.num_values:
                continue  # nulls only: nothing to bound
            if chunk.path_in_schema in columns:
                unbounded.add(columns[chunk.path_in_schema])
    return unbounded


def data_files_from_arrow(table: Table, data: pa.Table) -> list[DataFile]:
    """Write an Arrow table as Parquet data files of ``table`` (partitioned as the table is),
    with pyiceberg's writer; nothing is committed."""
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible, _dataframe_to_data_files

    _check_pyarrow_schema_compatible(table.metadata.schema(), provided_schema=data.schema,
                                     format_version=table.metadata.format_version)
    if data.num_rows == 0:
        return []
    return list(_dataframe_to_data_files(table_metadata=table.metadata, df=data, io=table.io,
                                         write_uuid=uuid.uuid4()))


def data_files_from_batches(table: Table, batches: Iterable[pa.RecordBatch],
                            schema: pa.Schema) -> list[DataFile]:
    """Write Arrow batches of ``schema`` as Parquet data files of unpartitioned ``table`` as they
    come: one target-sized file (``write.target-file-size-bytes`` of Arrow data) at a time, so
    at most one file's rows are held in memory. Nothing is committed; if the batches fail
    midway, the files already written are deleted before the error is raised. (pyiceberg's own
    streaming path, ``_dataframe_to_data_files`` with a ``RecordBatchReader``, hands every file's
    batches to a thread pool's ``map`` at once, which holds all of them in memory.)"""
    from pyiceberg.io.pyarrow import (
        _check_pyarrow_schema_compatible,
        bin_pack_record_batches,
        pyarrow_to_schema,
        write_file,
    )
    from pyiceberg.table import TableProperties, WriteTask
    from pyiceberg.utils.properties import property_as_int

    metadata = table.metadata
    if not metadata.spec().is_unpartitioned():
        raise ValueError(f"{qualified_name(table)} is partitioned")
    _check_pyarrow_schema_compatible(metadata.schema(), provided_schema=schema,
                                     format_version=metadata.format_version)
    target_size = property_as_int(metadata.properties, TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                                  TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT)
    task_schema = pyarrow_to_schema(schema, name_mapping=metadata.schema().name_mapping,
                                    format_version=metadata.format_version)
    write_uuid = uuid.uuid4()
    written: list[DataFile] = []
    try:
        for task_id, group in enumerate(bin_pack_record_batches(batches, target_size or 1)):
            task = WriteTask(write_uuid=write_uuid, task_id=task_id, record_batches=group,
                             schema=task_schema)
            written += write_file(table.io, metadata, iter([task]))
    except BaseException:
        delete_files_quietly(table, [f.file_path for f in written])
        raise
    return written


def delete_files_quietly(table: Table, paths: Iterable[str]) -> None:
    """Best-effort removal of data files that were written but will never be committed."""
    for path in paths:
        try:
            table.io.delete(path)
        except Exception:  # noqa: BLE001 - orphan cleanup must not hide the real outcome
            logger.warning("orphan_file_not_deleted", extra={"path": path})


@dataclass(frozen=True)
class SinkCommit:
    """The outcome of :func:`commit_sink`.

    ``already_committed`` is true when the table already held this job's commit of this barrier
    (a replay): nothing new was committed and ``snapshot_id`` is that earlier commit.
    """

    table: str
    job: str
    barrier: int
    snapshot_id: int
    already_committed: bool


class _AlreadyCommitted(Exception):
    """Raised from inside a pyiceberg retry when the refreshed table shows the barrier."""


class _RestartCommit(Exception):
    """Raised from inside a pyiceberg retry of an overwrite: the files to replace must be listed
    again from the new head, so the commit restarts from our own loop."""


HOOKED_TRANSACTION_METHOD = "_rebuild_snapshot_updates"
"""The private method of pyiceberg's ``Transaction`` that :func:`_make_guarded_transaction`
overrides (pyiceberg is pinned to the minor version this was written for; a test checks it)."""

_REFUSAL = re.compile(r"metaservice ([a-z_]+): (.*)", re.DOTALL)
# Refusals that say "try again" rather than "no": treated as conflicts.
_RETRYABLE_REFUSALS = {"concurrent_update", "rollback_in_progress"}


def refusal(exc: BaseException | None) -> APIError | None:
    """The plugin's error for a commit MetaService's catalog refused (an error whose message is
    ``metaservice <code>: <message>``, docs/contract.md#concurrency), or ``None`` for anything else,
    including the refusals that mean "try again" (``concurrent_update``,
    ``rollback_in_progress``)."""
    from pyiceberg.exceptions import (
        CommitFailedException,
        ForbiddenError,
        RESTError,
        ServiceUnavailableError,
    )

    if not isinstance(exc, (CommitFailedException, RESTError)):
        return None
    match = _REFUSAL.search(str(exc))
    if match is None or match.group(1) in _RETRYABLE_REFUSALS:
        return None
    code, message = match.group(1), match.group(2).strip()
    # a 503 (the database or the object store not answering) is "not now", not "no": the
    # plugin's ServiceUnavailableError, as the client's own 503s, never a 400
    status = (409 if isinstance(exc, CommitFailedException)
              else 403 if isinstance(exc, ForbiddenError)
              else 503 if isinstance(exc, ServiceUnavailableError) else 400)
    error = error_from_response(status, {"error": {"code": code, "message": message}})
    error.__cause__ = exc
    return error


def _make_guarded_transaction(table: Table, guard: Callable[[TableMetadata], None]) -> Any:
    """A pyiceberg transaction that re-runs ``guard`` on the refreshed table before pyiceberg
    rebuilds the snapshot for a retry (pyiceberg ≥ 0.12 retries commits on conflicts by
    rebasing them onto the new head, which would bypass our idempotency check otherwise), and
    that stops retrying a commit MetaService's catalog refused (retrying cannot change a "no")."""
    from pyiceberg.table import Transaction

    class _GuardedTransaction(Transaction):
        def _rebuild_snapshot_updates(self) -> None:
            # pyiceberg calls this while handling the CommitFailedException of the attempt.
            refused = refusal(sys.exc_info()[1])
            if refused is not None:
                raise refused
            guard(self._table.metadata)
            # a private method of pyiceberg's Transaction (pinned <0.13 for such helpers), which
            # its type hints do not declare
            super()._rebuild_snapshot_updates()  # type: ignore[misc]

    assert hasattr(Transaction, HOOKED_TRANSACTION_METHOD)
    return _GuardedTransaction(table)


def barrier_committed(metadata: TableMetadata, name: str, job: str,
                      barrier: int) -> LastCommit | None:
    """The snapshot of ``job``'s commit of ``barrier`` on the table's current lineage, or
    ``None`` when the table holds no commit of ``job`` at or after ``barrier``.

    Raises:
        SinkCommitConflictError: the table holds a later barrier of ``job`` (a commit of
            ``barrier`` now would go out of order), or records ``barrier`` without its snapshot.
    """
    last = last_commit_of(metadata, job)
    if last is None or last.barrier < barrier:
        return None
    if last.barrier > barrier:
        raise SinkCommitConflictError(
            f"{name} already holds barrier {last.barrier} of job {job!r}, after barrier "
            f"{barrier}; refusing to commit out of order")
    if last.snapshot_id is None:
        raise SinkCommitConflictError(
            f"{name} records barrier {barrier} of job {job!r} as committed, but its snapshot "
            "is no longer retained")
    return last


def commit_sink(
    table: Table,
    *,
    job: str,
    barrier: int,
    data_files: Sequence[DataFile] = (),
    overwrite: bool = False,
    summary: Mapping[str, str] | None = None,
    max_attempts: int = 5,
    root: bool = False,
) -> SinkCommit:
    """Commit ``data_files`` to ``table`` as one snapshot completing ``barrier`` for ``job``.

    Args:
        table: the sink (refreshed by this call).
        job: the job id, or a label for root ingestion.
        barrier: the barrier the snapshot completes.
        data_files: data files written for this barrier (may be empty: the snapshot is still
            created, so every barrier has a tagged snapshot to report).
        overwrite: replace every live data file of the table (an ``overwrite`` snapshot) instead
            of appending.
        summary: extra snapshot summary properties.
        max_attempts: attempts against concurrent commits of other writers.
        root: ``job`` is the label of a root ingestion, not a job: the snapshot carries it as
            ``metaservice.root-label`` (MetaService's catalog then records a root barrier).

    Returns:
        The snapshot completing ``barrier``; ``already_committed`` when it existed before.

    Raises:
        SinkCommitConflictError: the table already holds a commit of ``job`` for a later barrier
            on its current lineage, or the commit kept failing against concurrent writers.
        APIError: MetaService's catalog refused the commit (a subclass for the service's code,
            e.g. ``UnknownBarrierError``, ``TableHasWriterError``); nothing was committed.
    """
    from pyiceberg.exceptions import CommitFailedException, RESTError

    validate_job_id(job)
    name = qualified_name(table)
    marker = marker_property(job)
    tags = {**(summary or {}), (ROOT_LABEL_PROPERTY if root else JOB_PROPERTY): job,
            BARRIER_PROPERTY: str(int(barrier))}

    def existing(metadata: TableMetadata) -> LastCommit | None:
        return barrier_committed(metadata, name, job, barrier)

    def guard(metadata: TableMetadata) -> None:
        if existing(metadata) is not None:
            raise _AlreadyCommitted
        if overwrite:
            raise _RestartCommit

    for attempt in range(1, max_attempts + 1):
        table.refresh()
        found = existing(table.metadata)
        if found is not None:
            logger.info("sink_commit_replayed", extra={"table": name, "job": job,
                                                        "barrier": barrier,
                                                        "snapshot_id": found.snapshot_id})
            if found.snapshot_id is None:  # existing() refuses such a commit: unreachable
                raise SinkCommitConflictError(f"{name}: barrier {barrier} has no snapshot")
            return SinkCommit(name, job, barrier, found.snapshot_id, True)
        tx = _make_guarded_transaction(table, guard)
        _ensure_name_mapping(tx)
        update = tx.update_snapshot(snapshot_properties=tags)
        if overwrite and table.metadata.current_snapshot() is not None:
            producer = update.overwrite()
            with producer:
                for task in table.scan().plan_files():  # the head this commit replaces
                    producer.delete_data_file(task.file)
                for data_file in data_files:
                    producer.append_data_file(data_file)
        else:
            producer = update.fast_append()
            with producer:
                for data_file in data_files:
                    producer.append_data_file(data_file)
        snapshot_id = producer.snapshot_id
        tx.set_properties({marker: str(int(barrier))})
        try:
            tx.commit_transaction()
        except CommitFailedException as exc:
            refused = refusal(exc)
            if refused is not None:
                raise refused from exc
            _log_conflict(name, job, barrier, attempt, exc)
            continue
        except RESTError as exc:  # refusals that a retry cannot change (400, 403, 422)
            refused = refusal(exc)
            if refused is not None:
                raise refused from exc
            raise
        except (_AlreadyCommitted, _RestartCommit) as exc:
            _log_conflict(name, job, barrier, attempt, exc)
            continue
        logger.info("sink_committed", extra={"table": name, "job": job, "barrier": barrier,
                                              "snapshot_id": snapshot_id,
                                              "files": len(data_files)})
        return SinkCommit(name, job, barrier, snapshot_id, False)
    raise SinkCommitConflictError(
        f"commit of barrier {barrier} to {name} failed {max_attempts} times against concurrent "
        "writers")


def _log_conflict(name: str, job: str, barrier: int, attempt: int, exc: BaseException) -> None:
    logger.info("sink_commit_conflict", extra={"table": name, "job": job, "barrier": barrier,
                                                "attempt": attempt,
                                                "error": type(exc).__name__})


def _ensure_name_mapping(tx: Any) -> None:
    """Files without field ids are read through the table's name mapping: make sure it exists
    (pyiceberg's own ``add_files`` does the same)."""
    from pyiceberg.table import TableProperties

    metadata = tx.table_metadata
    if metadata.name_mapping() is None:
        tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING:
                           metadata.schema().name_mapping.model_dump_json()})


