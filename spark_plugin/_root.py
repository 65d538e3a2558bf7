"""Root ingestion: append a DataFrame to a root table as one snapshot completing a barrier,
and heartbeats for idle roots (docs/contract.md#root-reports).

Guarantees of :func:`append_root`:

- The data is written by Spark's Parquet writer and committed as exactly one Iceberg snapshot
  whose summary carries ``metaservice.root-label`` (the ingestion label) and
  ``metaservice.barrier``.
- The snapshot is reported to MetaService at the same barrier: by the commit itself through
  MetaService's built-in catalog (docs/contract.md#the-built-in-catalog), else by a report right
  after the commit.
- A commit that reached Iceberg but whose report was lost (crash, network) is reported by the
  next ``append_root`` or ``heartbeat_root`` of the same label on that table, before anything
  else, so the service never misses a root barrier.
- With an explicit ``barrier``, a repeated call (a replay after a crash) commits nothing twice:
  it finds the earlier commit of that barrier and only makes sure it is reported.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_plugin._barriers import barrier_after
from spark_plugin._client import MetaServiceClient, client_or_default
from spark_plugin._errors import (
    BarrierRegressionError,
    LakeStateError,
    TableHasWriterError,
    UnknownTableError,
)
from spark_plugin._iceberg import (
    commit_sink,
    delete_files_quietly,
    last_commit_of,
    load_table,
    records_barriers,
)
from spark_plugin._models import Commit
from spark_plugin._names import TableName, validate_job_id

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

DEFAULT_ROOT_LABEL = "append_root"
"""The ``metaservice.job`` tag of root commits when no label is given."""


@dataclass(frozen=True)
class _ServerLatest:
    barrier: int | None
    snapshot_id: int | None


def _server_latest(client: MetaServiceClient, name: TableName) -> _ServerLatest:
    """What the service knows of the root; refuses a table a running job writes (its barriers
    come from that job), before anything is written."""
    try:
        data = client.table_barriers(name, limit=1)
    except UnknownTableError:
        return _ServerLatest(None, None)
    writer = data.get("writer_job")
    if writer:
        raise TableHasWriterError(
            f"{name} is written by running job {writer!r}: it is not a root table",
            details={"table": str(name), "writer": writer})
    return _ServerLatest(data.get("latest_barrier"), data.get("latest_snapshot_id"))


def _report_unreported(client: MetaServiceClient, name: TableName, table: Table, label: str,
                       latest: _ServerLatest) -> _ServerLatest:
    """Report the label's last Iceberg commit if the service has not recorded it yet."""
    last = last_commit_of(table.metadata, label)
    if last is None or last.snapshot_id is None:
        return latest
    if latest.barrier is not None and last.barrier <= latest.barrier:
        return latest
    done = client.report_root_barrier(name, last.snapshot_id, last.barrier)
    logger.info("root_commit_recovered", extra={"table": str(name), "barrier": done.barrier,
                                                 "snapshot_id": done.snapshot_id})
    return _ServerLatest(done.barrier, done.snapshot_id)


def append_root(
    spark: SparkSession,
    df: DataFrame,
    table: str | TableName,
    *,
    client: MetaServiceClient | None = None,
    catalog: Any = None,
    barrier: int | None = None,
    label: str = DEFAULT_ROOT_LABEL,
    summary: dict[str, str] | None = None,
) -> Commit:
    """Append ``df`` to the root table as one Iceberg snapshot completing a barrier, then
    report it.

    Args:
        spark: the session writing the data.
        df: the rows to append (columns by name; missing optional columns are null).
        table: ``catalog.database.table``; must exist (see ``create_table_from_spark_schema``).
        client: the MetaService client (default: from ``$METASERVICE_URL``).
        catalog: a pyiceberg catalog, a :class:`~spark_plugin.CatalogSpec` or a mapping of
            names to either (default: found by the table's catalog name in Spark's
            configuration, then pyiceberg's, else MetaService's built-in catalog).
        barrier: the barrier this data completes, e.g. the end of the ingested time window in
            ms. Default: ``max(now_ms, latest + 1)``, chosen before the commit so that the
            snapshot can carry it. Pass it to make replays exactly-once.
        label: the ``metaservice.root-label`` tag of the commit (one label per ingestion
            stream).
        summary: extra snapshot summary properties.

    Returns:
        The recorded ``Commit`` (table, barrier, snapshot id).

    Raises:
        TableHasWriterError: a running job writes this table: it is not a root.
        BarrierRegressionError: ``barrier`` is not after the table's latest barrier.
        SinkCommitConflictError: the label already committed a later barrier.
    """
    name = TableName.parse(table)
    validate_job_id(label)
    client = client_or_default(client)
    tbl = load_table(name, catalog, spark=spark, client=client)
    latest = _report_unreported(client, name, tbl, label, _server_latest(client, name))
    last = last_commit_of(tbl.metadata, label)
    if barrier is not None and last is not None and last.barrier == barrier:
        if last.snapshot_id is None:
            raise LakeStateError(f"barrier {barrier} of {name} was committed, but its snapshot "
                                 "is no longer retained")
        logger.info("root_append_replayed", extra={"table": str(name), "barrier": barrier})
        return Commit(str(name), barrier, last.snapshot_id)
    if barrier is not None and latest.barrier is not None and barrier <= latest.barrier:
        # Refused before anything is written: the service would refuse the report after the
        # Iceberg commit, leaving a snapshot no barrier describes.
        raise BarrierRegressionError(
            f"barrier {barrier} is not after latest({name}) = {latest.barrier}",
            details={"table": str(name), "barrier": barrier, "latest": latest.barrier})
    if barrier is None:
        barrier = barrier_after(latest.barrier, last.barrier if last else None)
    from spark_plugin._spark_io import write_data_files

    files = write_data_files(spark, df, tbl)
    try:
        done = commit_sink(tbl, job=label, barrier=barrier, data_files=files, summary=summary,
                           root=True)
    except BaseException:
        delete_files_quietly(tbl, [f.file_path for f in files])
        raise
    if done.already_committed:
        delete_files_quietly(tbl, [f.file_path for f in files])
    if records_barriers(tbl, client.base_url):  # the commit recorded the barrier itself
        commit = Commit(str(name), barrier, done.snapshot_id)
    else:
        commit = client.report_root_barrier(name, done.snapshot_id, barrier)
    logger.info("root_appended", extra={"table": str(name), "barrier": commit.barrier,
                                         "snapshot_id": commit.snapshot_id,
                                         "files": len(files)})
    return commit


def heartbeat_root(
    table: str | TableName,
    *,
    client: MetaServiceClient | None = None,
    catalog: Any = None,
    barrier: int | None = None,
    label: str = DEFAULT_ROOT_LABEL,
) -> Commit:
    """Tell MetaService that the root table has nothing new up to ``barrier`` (default: now),
    so that an idle root does not hold its pipeline back.

    The heartbeat re-reports the table's latest recorded snapshot. It is refused when the
    Iceberg table holds snapshots the service has not recorded (after reporting this label's
    own lost commit, if any): claiming "nothing new" would then be false.

    Raises:
        LakeStateError: the table has no recorded barrier yet, or unreported snapshots.
    """
    name = TableName.parse(table)
    client = client_or_default(client)
    tbl = load_table(name, catalog, client=client)
    latest = _report_unreported(client, name, tbl, label, _server_latest(client, name))
    if latest.snapshot_id is None:
        raise LakeStateError(f"{name} has no completed barrier yet: nothing to heartbeat")
    current = tbl.metadata.current_snapshot()
    if current is not None and current.snapshot_id != latest.snapshot_id:
        raise LakeStateError(
            f"{name} has snapshot {current.snapshot_id} that MetaService has not recorded "
            f"(latest recorded: {latest.snapshot_id}); report it instead of a heartbeat")
    return client.report_root_barrier(name, latest.snapshot_id, barrier)
