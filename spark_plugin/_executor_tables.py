"""Iceberg tables where no catalog call should happen: on executors, in Spark's Python workers.

The driver side (the source's planning, the sink's planning and commit) loads tables by name
through the catalog; what it ships to executors is plain data: the metadata file location and
the FileIO properties. Executors open the table from its metadata file (pyiceberg's
``StaticTable``), read planned ``FileScanTask``s with pyiceberg's Arrow scan (deletes, field ids,
name mapping and type promotion handled there) and write Parquet data files with pyiceberg's
writer (field ids, statistics, partitioning).

FileIO properties are shipped rather than looked up by catalog name because Spark's Python
workers only see the environment the JVM was started with; the catalog's own secrets (its
database ``uri``, ``token``, ``credential``) are never shipped, only storage settings.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import FileScanTask, Table

logger = logging.getLogger(__name__)

_IO_PREFIXES = ("s3.", "gcs.", "adls.", "adlfs.", "hdfs.", "hf.", "oss.", "client.",
                "py-io-impl", "pyarrow.", "downcast-ns-timestamp-to-us-on-write")


def io_properties(table: Table) -> dict[str, str]:
    """The storage settings of ``table``'s FileIO, safe to ship to executors."""
    props = getattr(table.io, "properties", {}) or {}
    return {str(k): str(v) for k, v in props.items()
            if any(str(k).startswith(p) for p in _IO_PREFIXES)}


@dataclass(frozen=True)
class TableHandle:
    """Everything an executor needs to open a table: plain, picklable values."""

    name: str
    metadata_location: str
    io: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, name: str, table: Table) -> TableHandle:
        return cls(name, table.metadata_location, tuple(sorted(io_properties(table).items())))

    def open(self) -> Table:
        return _open_static(self.metadata_location, self.io)


@functools.lru_cache(maxsize=16)
def _open_static(metadata_location: str, io: tuple[tuple[str, str], ...]) -> Table:
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(metadata_location, properties=dict(io))


# -- reading ------------------------------------------------------------------------------------


def arrow_schema_for_spark(spark_schema_json: str) -> pa.Schema:
    """The Arrow schema Spark expects for a data source's declared Spark schema."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType, _parse_datatype_json_string

    schema = _parse_datatype_json_string(spark_schema_json)
    assert isinstance(schema, StructType)
    return to_arrow_schema(schema)


def read_tasks(handle: TableHandle, schema_json: str, tasks: Iterable[FileScanTask],
               target: pa.Schema,
               row_filter: BooleanExpression | None = None) -> Iterator[pa.RecordBatch]:
    """Rows of planned scan tasks as Arrow batches of the ``target`` schema; with
    ``row_filter``, the rows it keeps (row groups its bounds rule out are not read)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.schema import Schema

    table = handle.open()
    projected = Schema.model_validate_json(schema_json)
    scan = ArrowScan(table.metadata, table.io, projected,
                     AlwaysTrue() if row_filter is None else row_filter)
    for batch in scan.to_record_batches(list(tasks)):
        if batch.num_rows:
            yield conform(batch, target)


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``target``'s columns (by name) and types; missing columns are
    null."""
    import pyarrow as pa

    if batch.schema.equals(target, check_metadata=False):
        return batch
    columns = []
    for f in target:
        index = batch.schema.get_field_index(f.name)
        if index < 0:
            columns.append(pa.nulls(batch.num_rows, type=f.type))
        else:
            column = batch.column(index)
            columns.append(column if column.type == f.type else column.cast(f.type))
    return pa.RecordBatch.from_arrays(columns, schema=target)


def pack_tasks(tasks: list[Any], target_bytes: int, min_partitions: int = 2) -> list[list[Any]]:
    """Group scan tasks into Spark partitions of about ``target_bytes`` of data files (at least
    ``min_partitions`` when there are that many files), largest first."""
    if not tasks:
        return []
    total = sum(int(t.file.file_size_in_bytes) for t in tasks)
    count = max(-(-total // max(1, target_bytes)), min(min_partitions, len(tasks)))
    count = max(1, min(count, len(tasks)))
    bins: list[list[Any]] = [[] for _ in range(count)]
    sizes = [0] * count
    for task in sorted(tasks, key=lambda t: -int(t.file.file_size_in_bytes)):
        i = sizes.index(min(sizes))
        bins[i].append(task)
        sizes[i] += int(task.file.file_size_in_bytes)
    return bins


# -- writing ------------------------------------------------------------------------------------


def table_arrow_schema(schema: Schema) -> pa.Schema:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return schema_to_pyarrow(schema, include_field_ids=False)


def write_batches(handle: TableHandle, batches: Iterable[pa.RecordBatch]) -> tuple[list[DataFile],
                                                                                   int]:
    """Write Arrow batches (columns by name) as Parquet data files of the table, partitioned as
    the table is; nothing is committed. Returns the data files and the number of rows. An
    unpartitioned table's batches are written as they come, one target-sized file after
    another (bounded memory); a partitioned table's are gathered first, as pyiceberg splits a
    whole Arrow table by partition.

    Raises:
        UnsupportedSchemaError: a required column holds a null (files already written for the
            call are deleted; nothing is committed).
    """
    import pyarrow as pa

    from spark_plugin._errors import UnsupportedSchemaError
    from spark_plugin._iceberg import data_files_from_arrow, data_files_from_batches

    table = handle.open()
    schema = table.schema()
    target = table_arrow_schema(schema)
    required = [f.name for f in schema.fields if f.required]
    rows = 0

    def checked() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for batch in batches:
            if not batch.num_rows:
                continue
            batch = conform(batch, target)
            for name in required:
                if batch.column(name).null_count:
                    raise UnsupportedSchemaError(
                        f"null in required column {name!r} of {handle.name}")
            rows += batch.num_rows
            yield batch

    if table.spec().is_unpartitioned():
        return data_files_from_batches(table, checked(), target), rows
    data = pa.Table.from_batches(list(checked()), schema=target)
    return (data_files_from_arrow(table, data) if data.num_rows else []), rows
