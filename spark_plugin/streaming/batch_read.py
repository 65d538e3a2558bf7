"""Batch reads through the ``metaservice`` format: one table at the version the service answers.

    spark.read.format("metaservice").option("table", "lake.db.orders")
         .option("consistency", "strong").load()

The version is asked for once, when ``load()`` plans the DataFrame, and every action on that
DataFrame reads exactly that snapshot (a reproducible read). With ``leaseSeconds`` (default one
hour) the snapshot is leased in the same request (``POST /versions`` with ``lease_seconds``), so
expiration cannot delete what the DataFrame reads; a server without leases only logs a warning.
The Python Data Source API has no hook at the end of a read, so the lease is not released: it
expires. Use :func:`spark_plugin.consistent_read` to read several tables at one cut with a lease
held exactly for a block.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from spark_plugin._errors import InvalidRequestError
from spark_plugin._iceberg import load_table, plan_snapshot_read, snapshot_schema
from spark_plugin.streaming.connections import client_for
from spark_plugin.streaming.options import BatchReadOptions
from spark_plugin.streaming.pushdown import row_filter
from spark_plugin.streaming.source import partitions_of, read_partition

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResolvedVersion:
    table: str
    barrier: int
    snapshot_id: int
    consistency: str
    lease_id: str | None
    schema_json: str


def resolve_version(options: BatchReadOptions) -> ResolvedVersion:
    """Ask the service for the version to read (leased when asked) and its schema."""
    from spark_plugin._consistent_read import _lease_separately

    client = client_for(options.connection)
    holder = f"spark_plugin:read:{socket.gethostname()}:{os.getpid()}"
    try:
        answer = client.get_versions([options.table], options.consistency,
                                     barrier=options.barrier,
                                     lease_seconds=options.lease_seconds, holder=holder)
    except InvalidRequestError:
        if options.lease_seconds is None:
            raise
        # a server that does not know lease_seconds: ask without, lease separately below
        answer = client.get_versions([options.table], options.consistency,
                                     barrier=options.barrier)
    version = answer.versions[options.table]
    lease_id = answer.lease_id
    if options.lease_seconds is not None and lease_id is None:
        lease_id = _lease_separately(client, holder, options.lease_seconds, answer.versions)
    table = load_table(options.table, options.catalog)
    if table.metadata.snapshot_by_id(version.snapshot_id) is None:
        table.refresh()
    schema = snapshot_schema(table.metadata, version.snapshot_id)
    logger.info("batch_read_version", extra={"table": options.table, "barrier": version.barrier,
                                             "snapshot_id": version.snapshot_id,
                                             "consistency": answer.consistency,
                                             "lease_id": lease_id})
    return ResolvedVersion(options.table, version.barrier, version.snapshot_id,
                           answer.consistency, lease_id, schema.model_dump_json())


class ConsistentBatchReader(DataSourceReader):
    """Reads the snapshot resolved at ``load()``; planning happens on the driver, reading on
    executors with pyiceberg's Arrow scan."""

    def __init__(self, options: BatchReadOptions, version: ResolvedVersion,
                 spark_schema_json: str) -> None:
        self.options = options
        self.version = version
        self.spark_schema_json = spark_schema_json
        self.filters: list[Filter] = []

    def partitions(self) -> list[InputPartition]:
        from pyiceberg.schema import Schema

        table = load_table(self.options.table, self.options.catalog)
        if table.metadata.snapshot_by_id(self.version.snapshot_id) is None:
            table.refresh()
        pushed = row_filter(self.filters, Schema.model_validate_json(self.version.schema_json),
                            table.metadata.schema())
        try:
            plan = plan_snapshot_read(table, self.version.snapshot_id, allow_native=False,
                                      row_filter=pushed.planning if pushed.pushed else None)
        except Exception:  # noqa: BLE001 - a filter pyiceberg cannot plan with: plan without
            # (pyiceberg 0.12 overflows projecting DATE '9999-12-31' onto a year partition)
            logger.warning("batch_read_planned_unpruned", exc_info=True, extra={
                "table": self.options.table, "pushed": [repr(f) for f in pushed.pushed]})
            plan = plan_snapshot_read(table, self.version.snapshot_id, allow_native=False)
        logger.info("batch_read_planned", extra={
            "table": self.options.table, "snapshot_id": self.version.snapshot_id,
            "files": len(plan.file_paths), "filters": [repr(f) for f in self.filters],
            "pushed": [repr(f) for f in pushed.pushed]})
        return list(partitions_of(self.options.table, table, plan, self.version.schema_json,
                                  self.spark_schema_json, self.options.max_partition_bytes,
                                  pushed.scan if pushed.pushed else None))

    def read(self, partition: InputPartition) -> Any:
        # Spark hands back a partition partitions() made (ours); pyspark types the base class
        return read_partition(partition)  # type: ignore[arg-type]


class PruningBatchReader(ConsistentBatchReader):
    """A :class:`ConsistentBatchReader` given the query's filters (on a Spark that keeps a
    pushdown with its scan, which then needs ``spark.sql.python.filterPushdown.enabled``:
    pyspark refuses a reader with ``pushFilters`` without it). Those pyiceberg applies as Spark
    would (``spark_plugin/streaming/pushdown.py``) prune the files planned, the row groups read
    and the rows handed to Spark, which applies every filter again."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 - pyspark's
        """Keeps the query's filters for :meth:`partitions`; all of them are Spark's to
        evaluate after the scan as well: none is dropped."""
        self.filters = list(filters)
        return filters
