"""Iceberg through pyiceberg: catalogs by name, tagged commits that are idempotent per barrier,
and read plans for exact snapshots. No Spark here: maintenance tools, Structured Streaming
executors and the batch job all build on this module.

Commits (``commit_sink``):
    One Iceberg snapshot per call, whose summary carries ``metaservice.job`` and
    ``metaservice.barrier``, committed in the same metadata update as the table property
    ``metaservice.sink.<job>.last-barrier``. Before committing, and again before any retry, the
    table is checked for a commit of the same job and barrier on its current lineage; when one is
    found nothing is committed and that snapshot is returned. So a replay after a crash, or a
    zombie writer racing the new one, never commits a barrier twice.

Reads (``plan_snapshot_read``, ``plan_appended_read``):
    A plan lists the data files of one snapshot (or the files appended between two snapshots)
    and decides how they can be read without risk:

    - ``native`` — Spark's own Parquet reader. Chosen only when no file has delete files, every
      column type maps to Spark, and column identity cannot be confused: the table has one
      schema in its whole history (read by name), or every file carries Parquet field ids and no
      column changed type (read by field id, which survives renames, drops and re-adds).
    - ``arrow`` — pyiceberg's Arrow scan (applies deletes, name mapping, type promotion) for
      everything else.

    The plan is plain data (picklable) so that executors can execute it after reopening the
    catalog by name.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from spark_plugin._errors import (
    NotAppendOnlyError,
    SinkCommitConflictError,
    SnapshotNotFoundError,
    UnsupportedSchemaError,
)
from spark_plugin._names import TableName, validate_job_id

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import FileScanTask, Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

logger = logging.getLogger(__name__)

JOB_PROPERTY = "metaservice.job"
"""Snapshot summary key: the job (or root ingestion label) that committed the snapshot."""
BARRIER_PROPERTY = "metaservice.barrier"
"""Snapshot summary key: the barrier the snapshot completes."""



def marker_property(job: str) -> str:
    """The table property recording the last barrier ``job`` committed to the table."""
    return f"metaservice.sink.{job}.last-barrier"


# -- catalogs -------------------------------------------------------------------------------

_catalogs: dict[str, Catalog] = {}
_catalogs_lock = threading.Lock()


def load_catalog_by_name(name: str) -> Catalog:
    """The pyiceberg catalog called ``name``, configured through pyiceberg's own configuration
    (``~/.pyiceberg.yaml`` or ``PYICEBERG_CATALOG__<NAME>__*``); loaded once per process.

    The configuration is read when the catalog is first loaded, not when pyiceberg was first
    imported (pyiceberg's own default): a process that imported pyiceberg before setting the
    environment still finds the catalog."""
    with _catalogs_lock:
        catalog = _catalogs.get(name)
        if catalog is None:
            from pyiceberg.catalog import load_catalog
            from pyiceberg.utils.config import Config

            catalog = load_catalog(name, **(Config().get_catalog_config(name) or {}))
            _catalogs[name] = catalog
        return catalog


def resolve_catalog(table: TableName, catalog: Any = None) -> Catalog:
    """The catalog holding ``table``.

    Args:
        table: the table; its first part names the catalog.
        catalog: a pyiceberg ``Catalog`` (its name must be the table's catalog part), a mapping
            from catalog names to catalogs, or ``None`` to load the catalog by name.

    Raises:
        ValueError: the catalog given does not match the table's catalog part.
    """
    if catalog is None:
        return load_catalog_by_name(table.catalog)
    if isinstance(catalog, Mapping):
        try:
            return catalog[table.catalog]
        except KeyError:
            raise ValueError(f"no catalog {table.catalog!r} among {sorted(catalog)} "
                             f"for table {table}") from None
    name = getattr(catalog, "name", None)
    if name != table.catalog:
        raise ValueError(f"table {table} names catalog {table.catalog!r}, but the catalog passed "
                         f"is {name!r}: tables are named <pyiceberg catalog>.<database>.<table>")
    return catalog


def load_table(table: str | TableName, catalog: Any = None) -> Table:
    """Load an Iceberg table named ``catalog.database.table``."""
    name = TableName.parse(table)
    return resolve_catalog(name, catalog).load_table(name.identifier)


# -- lineage of commits ---------------------------------------------------------------------


def ancestors(metadata: TableMetadata, snapshot_id: int | None) -> Iterator[Snapshot]:
    """The snapshot ``snapshot_id`` and its retained ancestors, newest first."""
    current = None if snapshot_id is None else metadata.snapshot_by_id(snapshot_id)
    while current is not None:
        yield current
        parent = current.parent_snapshot_id
        current = None if parent is None else metadata.snapshot_by_id(parent)


def _summary_get(snapshot: Snapshot, key: str) -> str | None:
    summary = snapshot.summary
    return None if summary is None else summary.get(key)


@dataclass(frozen=True)
class LastCommit:
    """The last barrier a job committed to a table on its current lineage.

    ``snapshot_id`` is ``None`` when only the table property knows it (the tagged snapshot is no
    longer retained).
    """

    barrier: int
    snapshot_id: int | None


def last_commit_of(metadata: TableMetadata, job: str) -> LastCommit | None:
    """The newest snapshot committed by ``job`` among the current snapshot's ancestors; else the
    table property ``metaservice.sink.<job>.last-barrier`` (history expired); else ``None``.

    The lineage comes first because a rollback of the table leaves the property ahead of the
    data; the property covers histories shortened by snapshot expiration.
    """
    current = metadata.current_snapshot()
    for snapshot in ancestors(metadata, None if current is None else current.snapshot_id):
        if _summary_get(snapshot, JOB_PROPERTY) == job:
            barrier = _summary_get(snapshot, BARRIER_PROPERTY)
            if barrier is not None:
                return LastCommit(int(barrier), snapshot.snapshot_id)
    marker = metadata.properties.get(marker_property(job))
    if marker is not None:
        return LastCommit(int(marker), None)
    return None


def tagged_snapshots(metadata: TableMetadata) -> list[tuple[int, str, int]]:
    """``(snapshot_id, job, barrier)`` of every tagged snapshot on the current lineage,
    oldest first."""
    current = metadata.current_snapshot()
    out = []
    for s in ancestors(metadata, None if current is None else current.snapshot_id):
        job, barrier = _summary_get(s, JOB_PROPERTY), _summary_get(s, BARRIER_PROPERTY)
        if job is not None and barrier is not None:
            out.append((s.snapshot_id, job, int(barrier)))
    return out[::-1]


# -- writing --------------------------------------------------------------------------------


def data_location(table: Table) -> str:
    """Where new data files of ``table`` go (``write.data.path`` or ``<location>/data``)."""
    props = table.metadata.properties
    return props.get("write.data.path") or f"{table.location().rstrip('/')}/data"


def data_files_from_parquet(table: Table, paths: Sequence[str]) -> list[DataFile]:
    """Describe Parquet files already written into the table's location as Iceberg data files
    (statistics, partition) after checking them against the table's current schema."""
    from pyiceberg.io.pyarrow import parquet_files_to_data_files

    return list(parquet_files_to_data_files(table.io, table.metadata, iter(paths)))


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


def _make_guarded_transaction(table: Table, guard: Callable[[TableMetadata], None]) -> Any:
    """A pyiceberg transaction that re-runs ``guard`` on the refreshed table before pyiceberg
    rebuilds the snapshot for a retry (pyiceberg ≥ 0.12 retries commits on conflicts by
    rebasing them onto the new head, which would bypass our idempotency check otherwise)."""
    from pyiceberg.table import Transaction

    class _GuardedTransaction(Transaction):
        def _rebuild_snapshot_updates(self) -> None:
            guard(self._table.metadata)
            super()._rebuild_snapshot_updates()  # type: ignore[misc]

    return _GuardedTransaction(table)


def commit_sink(
    table: Table,
    *,
    job: str,
    barrier: int,
    data_files: Sequence[DataFile] = (),
    overwrite: bool = False,
    summary: Mapping[str, str] | None = None,
    max_attempts: int = 5,
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

    Returns:
        The snapshot completing ``barrier``; ``already_committed`` when it existed before.

    Raises:
        SinkCommitConflictError: the table already holds a commit of ``job`` for a later barrier
            on its current lineage, or the commit kept failing against concurrent writers.
    """
    from pyiceberg.exceptions import CommitFailedException

    validate_job_id(job)
    name = qualified_name(table)
    marker = marker_property(job)
    tags = {**(summary or {}), JOB_PROPERTY: job, BARRIER_PROPERTY: str(int(barrier))}

    def existing(metadata: TableMetadata) -> LastCommit | None:
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
            return SinkCommit(name, job, barrier, int(found.snapshot_id), True)  # type: ignore[arg-type]
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
        except (CommitFailedException, _AlreadyCommitted, _RestartCommit) as exc:
            logger.info("sink_commit_conflict", extra={"table": name, "job": job,
                                                        "barrier": barrier, "attempt": attempt,
                                                        "error": type(exc).__name__})
            continue
        logger.info("sink_committed", extra={"table": name, "job": job, "barrier": barrier,
                                              "snapshot_id": snapshot_id,
                                              "files": len(data_files)})
        return SinkCommit(name, job, barrier, snapshot_id, False)
    raise SinkCommitConflictError(
        f"commit of barrier {barrier} to {name} failed {max_attempts} times against concurrent "
        "writers")


def _ensure_name_mapping(tx: Any) -> None:
    """Files without field ids are read through the table's name mapping: make sure it exists
    (pyiceberg's own ``add_files`` does the same)."""
    from pyiceberg.table import TableProperties

    metadata = tx.table_metadata
    if metadata.name_mapping() is None:
        tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING:
                           metadata.schema().name_mapping.model_dump_json()})


# -- reading --------------------------------------------------------------------------------

ReadMethod = Literal["native", "arrow"]


@dataclass(frozen=True)
class ReadPlan:
    """How to read one snapshot (or the rows appended between two snapshots) of one table.

    Attributes:
        table: ``catalog.database.table``.
        snapshot_id: the snapshot read (the newer end for appended rows).
        from_snapshot_id: for appended rows, the older end (exclusive); else ``None``.
        schema_json: the Iceberg schema of ``snapshot_id`` (the columns returned), as JSON.
        file_paths: the data files to read (for appended rows: only the appended ones).
        method: ``"native"`` or ``"arrow"`` (see the module docstring).
        by_field_id: for ``native``, match columns by Parquet field id rather than by name.
        reason: why this method was chosen (for logs and tests).
        metadata_location: the table metadata file the plan was made from.
    """

    table: str
    snapshot_id: int
    from_snapshot_id: int | None
    schema_json: str
    file_paths: tuple[str, ...]
    method: ReadMethod
    by_field_id: bool
    reason: str
    metadata_location: str = ""
    _tasks: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    @property
    def schema(self) -> Schema:
        from pyiceberg.schema import Schema

        return Schema.model_validate_json(self.schema_json)


def snapshot_schema(metadata: TableMetadata, snapshot_id: int) -> Schema:
    """The schema a snapshot was written with (the table's current one if unknown)."""
    snapshot = metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise SnapshotNotFoundError(f"snapshot {snapshot_id} is not in the table")
    if snapshot.schema_id is not None:
        for schema in metadata.schemas:
            if schema.schema_id == snapshot.schema_id:
                return schema
    return metadata.schema()


def _require_snapshot(table: Table, snapshot_id: int) -> None:
    if table.metadata.snapshot_by_id(snapshot_id) is None:
        table.refresh()
        if table.metadata.snapshot_by_id(snapshot_id) is None:
            raise SnapshotNotFoundError(
                f"snapshot {snapshot_id} is not in {qualified_name(table)} (expired, rolled "
                "away, or a different table)")


def plan_snapshot_read(table: Table, snapshot_id: int, *, allow_native: bool = True) -> ReadPlan:
    """Plan reading the full content of ``snapshot_id``.

    Raises:
        SnapshotNotFoundError: the snapshot is not in the table.
    """
    _require_snapshot(table, snapshot_id)
    tasks = tuple(table.scan(snapshot_id=snapshot_id).plan_files())
    return _plan(table, snapshot_id, None, tasks, allow_native)


def appended_snapshots(metadata: TableMetadata, from_exclusive: int,
                       to_inclusive: int) -> list[Snapshot]:
    """The snapshots after ``from_exclusive`` up to ``to_inclusive``, oldest first, checked to
    be appends only.

    Raises:
        NotAppendOnlyError: ``from_exclusive`` is not an ancestor of ``to_inclusive``, or a
            snapshot in between is not an append (overwrite, delete, replace).
    """
    chain: list[Snapshot] = []
    for snapshot in ancestors(metadata, to_inclusive):
        if snapshot.snapshot_id == from_exclusive:
            break
        chain.append(snapshot)
    else:
        raise NotAppendOnlyError(
            f"snapshot {from_exclusive} is not a retained ancestor of {to_inclusive}: the "
            "table was rolled back or its history expired; read the full snapshot instead")
    for snapshot in chain:
        operation = snapshot.summary.operation.value if snapshot.summary is not None else "?"
        if operation != "append":
            raise NotAppendOnlyError(
                f"snapshot {snapshot.snapshot_id} between {from_exclusive} and {to_inclusive} "
                f"is a {operation!r}, not an append: the appended rows alone would not describe "
                "the change; read the full snapshot instead")
    return chain[::-1]


def plan_appended_read(table: Table, from_exclusive: int, to_inclusive: int, *,
                       allow_native: bool = True) -> ReadPlan:
    """Plan reading the rows appended after ``from_exclusive`` up to ``to_inclusive``, with the
    columns of ``to_inclusive``'s schema.

    Raises:
        SnapshotNotFoundError: either snapshot is not in the table.
        NotAppendOnlyError: see :func:`appended_snapshots`.
    """
    _require_snapshot(table, to_inclusive)
    _require_snapshot(table, from_exclusive)
    chain = appended_snapshots(table.metadata, from_exclusive, to_inclusive)
    if not chain:
        tasks: tuple[Any, ...] = ()
    else:
        tasks = tuple(table.incremental_append_scan(
            from_snapshot_id_exclusive=from_exclusive,
            to_snapshot_id_inclusive=to_inclusive).plan_files())
    return _plan(table, to_inclusive, from_exclusive, tasks, allow_native)


def _plan(table: Table, snapshot_id: int, from_id: int | None, tasks: tuple[Any, ...],
          allow_native: bool) -> ReadPlan:
    metadata = table.metadata
    schema = snapshot_schema(metadata, snapshot_id)
    unsupported = unsupported_columns(schema)
    if unsupported:
        raise UnsupportedSchemaError(
            f"{qualified_name(table)}: columns {unsupported} have types Spark cannot hold")
    paths = tuple(t.file.file_path for t in tasks)
    method, by_id, reason = choose_read_method(table, schema, tasks) if allow_native else (
        "arrow", False, "native reads disabled")
    logger.debug("read_planned", extra={"table": qualified_name(table),
                                        "snapshot_id": snapshot_id, "method": method,
                                        "reason": reason, "files": len(paths)})
    return ReadPlan(qualified_name(table), snapshot_id, from_id, schema.model_dump_json(), paths,
                    method, by_id, reason, table.metadata_location, tasks)


def qualified_name(table: Table) -> str:
    """``catalog.database.table`` of a pyiceberg table."""
    identifier = tuple(table.name())
    if len(identifier) >= 3:
        return ".".join(identifier[-3:])
    return ".".join((table.catalog.name, *identifier))


_SPARK_PRIMITIVES = {
    "boolean", "int", "long", "float", "double", "date", "timestamp", "timestamptz", "string",
    "binary",
}


def _type_is_spark_compatible(t: Any) -> bool:
    from pyiceberg.types import DecimalType, FixedType, ListType, MapType, StructType

    if isinstance(t, StructType):
        return all(_type_is_spark_compatible(f.field_type) for f in t.fields)
    if isinstance(t, ListType):
        return _type_is_spark_compatible(t.element_type)
    if isinstance(t, MapType):
        return _type_is_spark_compatible(t.key_type) and _type_is_spark_compatible(t.value_type)
    if isinstance(t, (DecimalType, FixedType)):
        return True
    return str(t) in _SPARK_PRIMITIVES


def unsupported_columns(schema: Schema) -> list[str]:
    """Top-level columns whose Iceberg type has no Spark equivalent (time, uuid, nanosecond
    timestamps, variant, geometry, unknown)."""
    return [f.name for f in schema.fields if not _type_is_spark_compatible(f.field_type)]


def _is_nested(t: Any) -> bool:
    from pyiceberg.types import ListType, MapType, StructType

    return isinstance(t, (StructType, ListType, MapType))


_GLOB_CHARS = set("*?[]{}\\")


def choose_read_method(table: Table, schema: Schema,
                       tasks: Sequence[Any]) -> tuple[ReadMethod, bool, str]:
    """Decide native (by name or by field id) or Arrow for these files; see module docstring.

    Returns:
        ``(method, by_field_id, reason)``.
    """
    if not tasks:
        return "native", False, "no data files"
    if any(t.delete_files for t in tasks):
        return "arrow", False, "delete files must be applied"
    metadata = table.metadata
    if any(_GLOB_CHARS & set(t.file.file_path) for t in tasks):
        return "arrow", False, "file paths with glob characters"
    if any(str(t.file.file_format).upper().find("PARQUET") < 0 for t in tasks):
        return "arrow", False, "not Parquet files"
    partitioned = any(spec.fields for spec in metadata.partition_specs)
    evolved = len(metadata.schemas) > 1
    if not evolved and not partitioned:
        return "native", False, "one schema in the table's history: columns read by name"
    if evolved:
        if _types_changed(metadata, schema):
            return "arrow", False, "a column changed type (promotion)"
        if any(_is_nested(f.field_type) for f in schema.fields):
            return "arrow", False, "schema evolved and has nested columns"
    footers = _footer_columns(table, [t.file.file_path for t in tasks])
    if partitioned:
        identity_sources = {
            pf.source_id
            for spec in metadata.partition_specs for pf in spec.fields
            if str(pf.transform) == "identity"
        }
        for f in schema.fields:
            if f.field_id not in identity_sources:
                continue
            for path, (ids, names) in footers.items():
                stored = f.field_id in ids if ids is not None else f.name in names
                if not stored:
                    return "arrow", False, f"partition column {f.name!r} not stored in {path}"
    with_ids = all(ids is not None for ids, _ in footers.values())
    if evolved:
        if not with_ids:
            return "arrow", False, "schema evolved and some files have no field ids"
        return "native", True, "schema evolved: columns read by field id"
    return "native", False, "partitioned, one schema, partition columns stored in every file"


def _types_changed(metadata: TableMetadata, schema: Schema) -> bool:
    wanted = {f.field_id: f.field_type for f in schema.fields}
    for other in metadata.schemas:
        for f in other.fields:
            if f.field_id in wanted and f.field_type != wanted[f.field_id]:
                return True
    return False


def _footer_columns(table: Table,
                    paths: Sequence[str]) -> dict[str, tuple[set[int] | None, set[str]]]:
    """Per file: its top-level Parquet field ids (``None`` unless every column has one) and
    column names, read from the footers in parallel."""
    import pyarrow.parquet as pq

    def read(path: str) -> tuple[str, tuple[set[int] | None, set[str]]]:
        with table.io.new_input(path).open() as stream:
            arrow_schema = pq.read_schema(stream)
        raw_ids = [(f.metadata or {}).get(b"PARQUET:field_id") for f in arrow_schema]
        ids = None if any(r is None for r in raw_ids) else {int(r) for r in raw_ids}  # type: ignore[arg-type]
        return path, (ids, set(arrow_schema.names))

    if len(paths) <= 1:
        return dict(read(p) for p in paths)
    with ThreadPoolExecutor(max_workers=min(8, len(paths))) as pool:
        return dict(pool.map(read, paths))


def read_arrow(table: Table, plan: ReadPlan) -> pa.Table:
    """Execute a plan with pyiceberg's Arrow scan (deletes applied, columns resolved by field id
    or name mapping, types promoted) — correct for every plan, native or not."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    tasks = plan._tasks
    if not tasks and plan.file_paths:
        tasks = tuple(_replan_tasks(table, plan))
    return ArrowScan(table.metadata, table.io, plan.schema, AlwaysTrue()).to_table(tasks)


def _replan_tasks(table: Table, plan: ReadPlan) -> Iterable[FileScanTask]:
    wanted = set(plan.file_paths)
    if plan.from_snapshot_id is None:
        tasks = table.scan(snapshot_id=plan.snapshot_id).plan_files()
    else:
        tasks = table.incremental_append_scan(
            from_snapshot_id_exclusive=plan.from_snapshot_id,
            to_snapshot_id_inclusive=plan.snapshot_id).plan_files()
    return [t for t in tasks if t.file.file_path in wanted]
