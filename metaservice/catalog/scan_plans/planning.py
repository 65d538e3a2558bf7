"""A scan's plan over a table's metadata, by pyiceberg's own scan machinery: the files a scan
of one snapshot (or of the appends between two) reads, pruned by its filter, as the Iceberg
REST specification encodes them (``FileScanTask``, ``DataFile``, ``DeleteFile``, values as
``PrimitiveTypeValue``). It reads manifests, so it is called outside any database transaction.

Nothing here knows the database: the caller hands it the metadata (the head's, or a read
session's cut's) and the table's ``FileIO``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.visitors import bind
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent, ManifestEntryStatus
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, StaticTable
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    FixedType,
    IcebergType,
    PrimitiveType,
    StructType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UUIDType,
)
from pyiceberg.utils.datetime import (
    days_to_date,
    micros_to_time,
    micros_to_timestamp,
    micros_to_timestamptz,
    nanos_to_timestamp,
)

from metaservice.catalog.errors import BadRequestError


@dataclass(frozen=True)
class Scan:
    """What a plan request asks (``PlanTableScanRequest``), validated."""

    snapshot_id: int | None = None
    start_snapshot_id: int | None = None
    end_snapshot_id: int | None = None
    select: Sequence[str] | None = None
    filter: BooleanExpression | None = None
    case_sensitive: bool = True
    use_snapshot_schema: bool = False
    stats_fields: Sequence[str] | None = None


@dataclass(frozen=True)
class Plan:
    """A scan's plan: the snapshots it read (to protect while the plan lives) and its file
    scan tasks in batches of at most the bound, each batch an answer of the specification's
    ``ScanTasks`` shape (``file-scan-tasks``, and the ``delete-files`` they reference)."""

    snapshot_ids: tuple[int, ...]
    batches: tuple[dict[str, Any], ...]


def plan_scan(metadata: TableMetadata, metadata_location: str, io: FileIO, scan: Scan,
              files_per_batch: int, confine: Callable[[str, str], object]) -> Plan:
    """Plan ``scan`` over ``metadata`` (at the head, or a read session's cut: its current
    snapshot is the default). Every manifest list and manifest is handed to ``confine`` (with
    what it is) before it is read.

    Raises:
        BadRequestError: a snapshot the metadata does not hold, an incremental range that is
        not one line of appends, a field or filter the scan's schema cannot bind.
        OSError, ValueError: a manifest list or manifest that cannot be read.
    """
    table = StaticTable(("scan",), metadata, metadata_location, io, NoopCatalog("scan"))
    if scan.start_snapshot_id is not None and scan.end_snapshot_id is not None:
        end = _snapshot(metadata, scan.end_snapshot_id, "end-snapshot-id")
        appended = _appends_between(metadata, scan.start_snapshot_id, end)
        snapshot: Snapshot | None = end
        protected = (scan.start_snapshot_id, *(s.snapshot_id for s in appended))
    elif scan.snapshot_id is not None:
        snapshot, appended = _snapshot(metadata, scan.snapshot_id, "snapshot-id"), None
        protected = (snapshot.snapshot_id,)
    else:
        snapshot, appended = metadata.current_snapshot(), None
        protected = () if snapshot is None else (snapshot.snapshot_id,)
    schema = _scan_schema(metadata, snapshot, scan.use_snapshot_schema)
    row_filter = scan.filter if scan.filter is not None else AlwaysTrue()
    stats_ids = _field_ids(schema, scan.stats_fields or (), scan.case_sensitive, "stats-fields")
    _field_ids(schema, scan.select or (), scan.case_sensitive, "select")
    try:
        bind(schema, row_filter, scan.case_sensitive)
    except (ValueError, TypeError) as exc:
        raise BadRequestError(f"invalid scan: filter: {exc}") from exc
    if snapshot is None:
        return Plan(protected, ())
    for read in (snapshot, *(appended or ())):
        _confine_manifests(read, io, confine)
    tasks: list[FileScanTask] = list(table.scan(
        row_filter=row_filter, case_sensitive=scan.case_sensitive,
        snapshot_id=snapshot.snapshot_id).plan_files())
    if appended is not None:
        added = _added_files(io, appended)
        tasks = [t for t in tasks if t.file.file_path in added]
    encoder = _Encoder(metadata, schema, stats_ids)
    batches = tuple(encoder.batch(tasks[i:i + files_per_batch])
                    for i in range(0, len(tasks), files_per_batch))
    return Plan(tuple(dict.fromkeys(protected)), batches)


def _confine_manifests(snapshot: Snapshot, io: FileIO,
                       confine: Callable[[str, str], object]) -> None:
    """The snapshot's manifest list and manifests, each confined before it is read (pyiceberg
    keeps the list it read, so planning reads it once)."""
    confine(snapshot.manifest_list, "manifest list")
    for manifest in snapshot.manifests(io):
        confine(manifest.manifest_path, "manifest")


def _snapshot(metadata: TableMetadata, snapshot_id: int, what: str) -> Snapshot:
    snapshot = metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise BadRequestError(f"invalid scan: {what} {snapshot_id} is not a snapshot of the "
                              "table (as this catalog serves it here)")
    return snapshot


def _appends_between(metadata: TableMetadata, start_id: int, end: Snapshot) -> list[Snapshot]:
    """The snapshots after ``start_id`` up to ``end`` on ``end``'s line, each an append."""
    found: list[Snapshot] = []
    current: Snapshot | None = end
    while current is not None and current.snapshot_id != start_id:
        found.append(current)
        parent = current.parent_snapshot_id
        current = None if parent is None else metadata.snapshot_by_id(parent)
    if current is None:
        raise BadRequestError(f"invalid scan: start-snapshot-id {start_id} is not an ancestor "
                              f"of end-snapshot-id {end.snapshot_id}")
    for snapshot in found:
        operation = snapshot.summary.operation if snapshot.summary is not None else None
        if operation != Operation.APPEND:
            raise BadRequestError(
                f"invalid scan: an incremental scan reads appends only, and snapshot "
                f"{snapshot.snapshot_id} between start-snapshot-id and end-snapshot-id is "
                f"{getattr(operation, 'value', operation)}")
    return found


def _added_files(io: FileIO, snapshots: Sequence[Snapshot]) -> set[str]:
    """The data files each of ``snapshots`` added."""
    added: set[str] = set()
    for snapshot in snapshots:
        for manifest in snapshot.manifests(io):
            if (manifest.content != ManifestContent.DATA
                    or manifest.added_snapshot_id != snapshot.snapshot_id):
                continue
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                if (entry.status == ManifestEntryStatus.ADDED
                        and entry.snapshot_id == snapshot.snapshot_id):
                    added.add(entry.data_file.file_path)
    return added


def _scan_schema(metadata: TableMetadata, snapshot: Snapshot | None,
                 use_snapshot_schema: bool) -> Schema:
    """The schema a scan's fields and filter name: the table's, or with ``use-snapshot-schema``
    the one the snapshot was written with (time travel)."""
    if use_snapshot_schema and snapshot is not None and snapshot.schema_id is not None:
        for schema in metadata.schemas:
            if schema.schema_id == snapshot.schema_id:
                return schema
    return metadata.schema()


def _field_ids(schema: Schema, names: Sequence[str], case_sensitive: bool,
               what: str) -> list[int]:
    ids = []
    for name in names:
        try:
            field = (schema.find_field(name, case_sensitive=case_sensitive))
        except ValueError as exc:
            raise BadRequestError(f"invalid scan: {what}: no field {name!r} in the scan's "
                                  "schema") from exc
        ids.append(field.field_id)
    return ids


class _Encoder:
    """Content files as the specification writes them."""

    def __init__(self, metadata: TableMetadata, schema: Schema, stats_ids: Sequence[int]) -> None:
        self.metadata, self.schema = metadata, schema
        self.stats_ids = list(dict.fromkeys(stats_ids))
        self.partition_types: dict[int, StructType] = {}

    def batch(self, tasks: Sequence[FileScanTask]) -> dict[str, Any]:
        deletes: dict[str, int] = {}
        delete_files: list[dict[str, Any]] = []
        answers = []
        for task in tasks:
            references = []
            for delete in sorted(task.delete_files, key=lambda d: d.file_path):
                if delete.file_path not in deletes:
                    deletes[delete.file_path] = len(delete_files)
                    delete_files.append(self.content_file(delete))
                references.append(deletes[delete.file_path])
            answer: dict[str, Any] = {"data-file": self.content_file(task.file)}
            if references:
                answer["delete-file-references"] = references
            if task.residual is not None and task.residual != AlwaysTrue():
                answer["residual-filter"] = task.residual.model_dump(mode="json")
            answers.append(answer)
        return {"file-scan-tasks": answers, "delete-files": delete_files}

    def content_file(self, file: DataFile) -> dict[str, Any]:
        content = file.content
        answer: dict[str, Any] = {
            "content": _CONTENT[content],
            "file-path": file.file_path,
            "file-format": str(file.file_format.value).lower(),
            "spec-id": file.spec_id,
            "partition": self.partition(file),
            "file-size-in-bytes": file.file_size_in_bytes,
            "record-count": file.record_count,
        }
        if file.key_metadata:
            answer["key-metadata"] = bytes(file.key_metadata).hex().upper()
        if file.split_offsets:
            answer["split-offsets"] = list(file.split_offsets)
        if file.sort_order_id is not None:
            answer["sort-order-id"] = file.sort_order_id
        if content == DataFileContent.DATA:
            first_row_id = getattr(file, "first_row_id", None)
            if first_row_id is not None:
                answer["first-row-id"] = first_row_id
            if self.stats_ids:
                self._stats(file, answer)
        elif content == DataFileContent.POSITION_DELETES:
            for key, attribute in (("referenced-data-file", "referenced_data_file"),
                                   ("content-offset", "content_offset"),
                                   ("content-size-in-bytes", "content_size_in_bytes")):
                value = getattr(file, attribute, None)
                if value is not None:
                    answer[key] = value
        elif file.equality_ids:
            answer["equality-ids"] = list(file.equality_ids)
        return answer

    def partition(self, file: DataFile) -> list[Any]:
        spec_id = file.spec_id
        if spec_id not in self.partition_types:
            spec = self.metadata.specs().get(spec_id)
            self.partition_types[spec_id] = (StructType() if spec is None
                                             else spec.partition_type(self.metadata.schema()))
        fields = self.partition_types[spec_id].fields
        record = file.partition
        return [value_json(fields[i].field_type if i < len(fields) else None, record[i])
                for i in range(len(record))]

    def _stats(self, file: DataFile, answer: dict[str, Any]) -> None:
        for key, counts in (("column-sizes", file.column_sizes),
                            ("value-counts", file.value_counts),
                            ("null-value-counts", file.null_value_counts),
                            ("nan-value-counts", file.nan_value_counts)):
            kept = [(i, counts[i]) for i in self.stats_ids if counts and i in counts]
            if kept:
                answer[key] = {"keys": [i for i, _ in kept], "values": [v for _, v in kept]}
        for key, bounds in (("lower-bounds", file.lower_bounds),
                            ("upper-bounds", file.upper_bounds)):
            kept = []
            for field_id in self.stats_ids:
                if not bounds or field_id not in bounds:
                    continue
                field_type = self._primitive(field_id)
                if field_type is None:
                    continue
                value = value_json(field_type, from_bytes(field_type, bounds[field_id]))
                if value is not None:
                    kept.append((field_id, value))
            if kept:
                answer[key] = {"keys": [i for i, _ in kept], "values": [v for _, v in kept]}

    def _primitive(self, field_id: int) -> PrimitiveType | None:
        try:
            field_type = self.schema.find_field(field_id).field_type
        except ValueError:
            return None
        return field_type if isinstance(field_type, PrimitiveType) else None


_CONTENT = {DataFileContent.DATA: "data", DataFileContent.POSITION_DELETES: "position-deletes",
            DataFileContent.EQUALITY_DELETES: "equality-deletes"}


def value_json(field_type: IcebergType | None, value: Any) -> Any:
    """A value in pyiceberg's internal representation (days, microseconds, bytes) as the
    specification's ``PrimitiveTypeValue``; None stays None (and a float that JSON cannot
    write, NaN or infinite, is left out as None)."""
    if value is None:
        return None
    if isinstance(field_type, DateType) and isinstance(value, int):
        return days_to_date(value).isoformat()
    if isinstance(field_type, TimeType) and isinstance(value, int):
        return micros_to_time(value).isoformat(timespec="microseconds")
    if isinstance(field_type, TimestampType) and isinstance(value, int):
        return micros_to_timestamp(value).isoformat(timespec="microseconds")
    if isinstance(field_type, TimestamptzType) and isinstance(value, int):
        return micros_to_timestamptz(value).isoformat(timespec="microseconds")
    if isinstance(field_type, (TimestampNanoType, TimestamptzNanoType)) and isinstance(value, int):
        seconds = nanos_to_timestamp(value - value % 1000).isoformat(timespec="microseconds")
        zone = "+00:00" if isinstance(field_type, TimestamptzNanoType) else ""
        return f"{seconds.removesuffix('+00:00')}{value % 1000:03d}{zone}"
    if isinstance(field_type, DecimalType) or isinstance(value, Decimal):
        return str(value)
    if isinstance(field_type, UUIDType) or isinstance(value, uuid.UUID):
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value)))
    if isinstance(value, (bytes, bytearray)) or isinstance(field_type, (FixedType, BinaryType)):
        return bytes(value).hex().upper()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (date, datetime, time)):
        return value.isoformat()
    return value
