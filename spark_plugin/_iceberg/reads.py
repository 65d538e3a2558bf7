"""Read plans: which data files make up one snapshot (or the rows appended between two), and
how they can be read without risk.

A plan lists the data files and chooses a method:

- ``native`` — Spark's own Parquet reader. Chosen only when no file has delete files, every
  column type maps to Spark, and column identity cannot be confused: the table has one schema in
  its whole history (read by name), or every file carries Parquet field ids and no column
  changed type (read by field id, which survives renames, drops and re-adds).
- ``arrow`` — pyiceberg's Arrow scan (applies deletes, name mapping, type promotion) for
  everything else.

The plan is plain data (picklable) so that executors can execute it after reopening the table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from spark_plugin._errors import NotAppendOnlyError, SnapshotNotFoundError, UnsupportedSchemaError
from spark_plugin._iceberg.catalogs import qualified_name
from spark_plugin._iceberg.markers import ancestors

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema
    from pyiceberg.table import FileScanTask, Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

logger = logging.getLogger(__name__)

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


def plan_snapshot_read(table: Table, snapshot_id: int, *, allow_native: bool = True,
                       row_filter: BooleanExpression | None = None) -> ReadPlan:
    """Plan reading the full content of ``snapshot_id``; with ``row_filter``, only the files
    whose partition values and column bounds may hold rows it keeps.

    Raises:
        SnapshotNotFoundError: the snapshot is not in the table.
    """
    _require_snapshot(table, snapshot_id)
    scan = (table.scan(snapshot_id=snapshot_id) if row_filter is None
            else table.scan(snapshot_id=snapshot_id, row_filter=row_filter))
    tasks = tuple(scan.plan_files())
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
        present = [int(r) for r in raw_ids if r is not None]
        ids = set(present) if len(present) == len(raw_ids) else None
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

    return ArrowScan(table.metadata, table.io, plan.schema, AlwaysTrue()).to_table(
        scan_tasks(table, plan))


def scan_tasks(table: Table, plan: ReadPlan) -> tuple[FileScanTask, ...]:
    """The plan's scan tasks (planned again from ``table`` for a plan that kept none)."""
    tasks = plan._tasks
    if not tasks and plan.file_paths:
        tasks = tuple(_replan_tasks(table, plan))
    return tasks


def _replan_tasks(table: Table, plan: ReadPlan) -> Iterable[FileScanTask]:
    wanted = set(plan.file_paths)
    if plan.from_snapshot_id is None:
        tasks = table.scan(snapshot_id=plan.snapshot_id).plan_files()
    else:
        tasks = table.incremental_append_scan(
            from_snapshot_id_exclusive=plan.from_snapshot_id,
            to_snapshot_id_inclusive=plan.snapshot_id).plan_files()
    return [t for t in tasks if t.file.file_path in wanted]
