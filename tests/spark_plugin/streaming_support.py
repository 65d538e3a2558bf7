"""Helpers shared by the streaming tests: Arrow ingestion into root tables (no Spark job per
append, so tests stay fast) and small waits."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from spark_plugin._iceberg import commit_sink, data_files_from_arrow, load_table


def ingest(client: Any, catalog: Any, table: str, rows: dict[str, list[Any]],
           barrier: int, label: str = "test-ingest") -> int:
    """Append ``rows`` to root ``table`` as one snapshot completing ``barrier``; report it."""
    tbl = load_table(table, catalog)
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    schema = schema_to_pyarrow(tbl.schema(), include_field_ids=False)
    data = pa.Table.from_pydict(rows, schema=schema)
    files = data_files_from_arrow(tbl, data)
    done = commit_sink(tbl, job=label, barrier=barrier, data_files=files)
    client.report_root_barrier(table, done.snapshot_id, barrier)
    return done.snapshot_id


def wait_until(predicate: Callable[[], Any], timeout: float = 60, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(every)
