"""What a Spark task's write does with the rows it is given (``write_batches``, the executors'
side of batch writes on object stores and of the streaming sink): files of the table's target
size written one after the other, and nothing left behind when the rows fail midway. Plain
pyiceberg on a local warehouse: no Spark."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import spark_plugin as sp
from spark_plugin._executor_tables import TableHandle, write_batches

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True),
                NestedField(2, "note", StringType(), required=False))
ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("note", pa.string())])


def batch(start: int, rows: int, *, null_id: bool = False) -> pa.RecordBatch:
    ids = [None if null_id else start + i for i in range(rows)]
    return pa.RecordBatch.from_arrays(
        [pa.array(ids, pa.int64()), pa.array([f"n{start + i}" for i in range(rows)])],
        schema=ARROW if not null_id else pa.schema([pa.field("id", pa.int64()),
                                                    ARROW.field("note")]))


def data_files_on_disk(table) -> list[Path]:
    return sorted(Path(table.location().removeprefix("file://")).rglob("data/*.parquet"))


@pytest.fixture
def table(catalog, database):
    # ~1 batch of 1,000 rows per file: the target counts Arrow bytes
    return catalog.create_table((database, "t"), schema=SCHEMA,
                                properties={"write.target-file-size-bytes": "20000"})


def test_batches_are_written_one_target_sized_file_after_another(table) -> None:
    handle = TableHandle.of("lake.db.t", table)
    files, rows = write_batches(handle, (batch(1000 * k, 1000) for k in range(4)))
    assert rows == 4000 and sum(f.record_count for f in files) == 4000
    assert len(files) >= 3  # not one file of everything
    assert sorted(Path(f.file_path.removeprefix("file://")) for f in files) == \
        data_files_on_disk(table)


def test_rows_failing_midway_leave_no_file_behind(table) -> None:
    handle = TableHandle.of("lake.db.t", table)

    def rows() -> Iterator[pa.RecordBatch]:
        for k in range(3):
            yield batch(1000 * k, 1000)
        yield batch(3000, 2, null_id=True)

    with pytest.raises(sp.UnsupportedSchemaError, match="null in required column 'id'"):
        write_batches(handle, rows())
    assert data_files_on_disk(table) == []
