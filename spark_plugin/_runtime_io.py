"""Reads and writes through Apache Iceberg's own Spark runtime, for a session that has it.

A session whose catalog ``<catalog>`` is Iceberg's ``SparkCatalog`` (``spark.sql.catalog.<catalog>
= org.apache.iceberg.spark.SparkCatalog``, the runtime's jar on the classpath: the Spark 4.1
route, docs/engines.md) reads and writes the tables of that catalog the way Spark SQL does:

- a barrier's snapshot is ``spark.read.option("versionAsOf", S).table(name)``, and the rows
  appended between two barriers Iceberg's incremental read (``start-snapshot-id`` /
  ``end-snapshot-id``), after the plugin checked that every snapshot in between is an append
  (Iceberg's incremental read skips the others; the plugin refuses them,
  :class:`~spark_plugin.NotAppendOnlyError`). Delete files, schema evolution and every column
  type are the runtime's, read by executors;
- a sink's commit is one ``DataFrameWriterV2`` write (``append``, or ``overwrite`` of every row
  for a step that replaces the sink) carrying the job and the barrier as the runtime's snapshot
  properties (``snapshot-property.metaservice.job`` / ``.barrier``), so that MetaService's
  catalog completes the barrier in the commit's own transaction, as for any Spark SQL write.

The caller checks, before each commit, that the sink does not hold the barrier already: a step
replayed after a crash then commits only the sinks it had not committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from spark_plugin._iceberg import appended_snapshots
from spark_plugin._names import TableName

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

RUNTIME_CATALOGS = frozenset({"org.apache.iceberg.spark.SparkCatalog",
                              "org.apache.iceberg.spark.SparkSessionCatalog"})
SNAPSHOT_PROPERTY = "snapshot-property."


def served_by_runtime(spark: SparkSession, table: str | TableName) -> bool:
    """Whether ``spark`` reaches ``table`` through Iceberg's own runtime: its catalog is
    configured as Iceberg's ``SparkCatalog`` in the session."""
    catalog = TableName.parse(table).catalog
    return spark.conf.get(f"spark.sql.catalog.{catalog}", None) in RUNTIME_CATALOGS


def read_snapshot(spark: SparkSession, table: str, snapshot_id: int) -> DataFrame:
    """The rows of ``table`` at ``snapshot_id``."""
    # Spark's own time travel (Iceberg 1.12's runtime refuses its former ``snapshot-id``)
    return spark.read.option("versionAsOf", str(snapshot_id)).table(table)


def read_appended(spark: SparkSession, table: str, metadata_of: Table, from_exclusive: int,
                  to_inclusive: int) -> DataFrame:
    """The rows appended after ``from_exclusive`` up to ``to_inclusive``.

    Raises:
        NotAppendOnlyError: a snapshot in between is not an append, or ``from_exclusive`` is
            not an ancestor of ``to_inclusive``.
    """
    if not appended_snapshots(metadata_of.metadata, from_exclusive, to_inclusive):
        return read_snapshot(spark, table, to_inclusive).limit(0)
    return (spark.read.format("iceberg")
            .option("start-snapshot-id", str(from_exclusive))
            .option("end-snapshot-id", str(to_inclusive))
            .load(table))


def write_commit(spark: SparkSession, table: str, frames: Sequence[DataFrame], *,
                 replace: bool, properties: Mapping[str, str]) -> None:
    """One Iceberg commit of ``frames`` (their union by column name; none: no rows) to
    ``table`` through the runtime, with ``properties`` in its snapshot summary: an append, or
    with ``replace`` an overwrite of every row."""
    from pyspark.sql.functions import lit

    if frames:
        data = frames[0]
        for frame in frames[1:]:
            data = data.unionByName(frame)
    else:
        data = spark.table(table).limit(0)
    writer = data.writeTo(table)
    for key, value in properties.items():
        writer = writer.option(SNAPSHOT_PROPERTY + key, value)
    if replace:
        writer.overwrite(lit(True))
    else:
        writer.append()
