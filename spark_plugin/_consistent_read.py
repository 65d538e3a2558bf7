"""Consistent multi-table reads for OLAP (docs/contract.md#consistent-versions,
docs/contract.md#snapshot-usage-and-expiration).

Guarantees of :func:`consistent_read`:

- The DataFrames read exactly the snapshots MetaService answered, all reflecting the same
  barrier per pipeline component under the chosen consistency (or exactly ``barrier``).
- Those snapshots are leased for the whole block (the lease is taken in the same transaction as
  the answer, renewed in the background while the block runs, released at its end), so
  expiration cannot delete a file the block still reads. A lease that is lost all the same (the
  process stalled past its term) is logged as ``lease_lost`` and no longer renewed.
- A snapshot that is not in the Iceberg table raises :class:`~spark_plugin.SnapshotNotFoundError`
  rather than reading something else.

Spark DataFrames are lazy: run the actions inside the block.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from spark_plugin._client import MetaServiceClient, client_or_default
from spark_plugin._errors import (
    APIError,
    LeaseExpiredError,
    MetaServiceError,
    NotFoundError,
    UnknownLeaseError,
)
from spark_plugin._iceberg import load_table, plan_snapshot_read
from spark_plugin._models import TableVersion
from spark_plugin._names import TableName

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 600.0


class ConsistentFrames(dict[str, "DataFrame"]):
    """``{table name: DataFrame}``, plus what the service answered.

    Attributes:
        versions: per table, the barrier and snapshot id read.
        consistency: ``"strong"``, ``"weak"`` or ``"barrier"``.
        lease_id: the lease protecting the snapshots, if any.
    """

    versions: dict[str, TableVersion]
    consistency: str
    lease_id: str | None


class _LeaseRenewer:
    """Renews a lease every ``ttl/3`` seconds until stopped, or until the lease is lost: once
    the server answers that it expired (``lease_expired``) or no longer knows it
    (``unknown_lease``), no renewal can bring it back, and ``lost`` holds that answer. Other
    failures (the server unreachable for a while) are retried at the next period."""

    def __init__(self, client: MetaServiceClient, lease_id: str, ttl_seconds: float) -> None:
        self._client, self._lease_id, self._ttl = client, lease_id, ttl_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{lease_id}", daemon=True)
        self.lost: APIError | None = None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(max(1.0, self._ttl / 3)):
            try:
                self._client.renew_lease(self._lease_id, self._ttl)
            except (LeaseExpiredError, UnknownLeaseError) as exc:
                self.lost = exc
                logger.error("lease_lost", extra={"lease_id": self._lease_id, "code": exc.code})
                return
            except MetaServiceError:
                logger.warning("lease_renewal_failed", extra={"lease_id": self._lease_id},
                               exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _default_holder() -> str:
    return f"spark_plugin:{socket.gethostname()}:{os.getpid()}"


@contextmanager
def consistent_read(
    spark: SparkSession,
    tables: Iterable[str | TableName],
    consistency: str = "strong",
    barrier: int | None = None,
    lease_seconds: float | None = DEFAULT_LEASE_SECONDS,
    *,
    client: MetaServiceClient | None = None,
    catalog: Any = None,
    holder: str | None = None,
) -> Iterator[ConsistentFrames]:
    """Read several tables at one consistent cut, leased for the block.

    Args:
        spark: the session.
        tables: ``catalog.database.table`` names.
        consistency: ``"strong"`` (the same cut for every query of a component) or ``"weak"``
            (the freshest cut common to the requested tables).
        barrier: read exactly this barrier instead (a reproducible read).
        lease_seconds: lease time-to-live, renewed while the block runs; ``None`` for no lease.
        client: the MetaService client (default: from ``$METASERVICE_URL``).
        catalog: a pyiceberg catalog, a :class:`~spark_plugin.CatalogSpec`, a mapping of
            names to either, or ``None`` (found by name, see ``spark_plugin._iceberg``).
        holder: who holds the lease (default: ``spark_plugin:<host>:<pid>``).

    Yields:
        A :class:`ConsistentFrames` mapping each table name to its DataFrame.

    Raises:
        NoVersionError, CatchingUpError, BarrierNotCompleteError, BarrierNotExactError,
            SnapshotExpiredError: as answered by the service.
        SnapshotNotFoundError: an answered snapshot is not in the Iceberg table.
    """
    if consistency not in ("strong", "weak"):
        raise ValueError("consistency must be 'strong' or 'weak'")
    names = [str(TableName.parse(t)) for t in dict.fromkeys(str(t) for t in tables)]
    if not names:
        raise ValueError("no tables to read")
    client = client_or_default(client)
    holder = holder or _default_holder()
    answer = client.get_versions(names, consistency, barrier=barrier,
                                 lease_seconds=lease_seconds, holder=holder)
    lease_id = answer.lease_id
    if lease_seconds is not None and lease_id is None:
        lease_id = _lease_separately(client, holder, lease_seconds, answer.versions)
    renewer = None
    try:
        from spark_plugin._spark_io import dataframe_from_plan

        frames = ConsistentFrames()
        frames.versions = dict(answer.versions)
        frames.consistency = answer.consistency
        frames.lease_id = lease_id
        for name in names:
            version = answer.versions[name]
            tbl = load_table(name, catalog, spark=spark, client=client)
            frames[name] = dataframe_from_plan(spark, tbl,
                                               plan_snapshot_read(tbl, version.snapshot_id))
        if lease_id is not None and lease_seconds is not None:
            renewer = _LeaseRenewer(client, lease_id, lease_seconds)
            renewer.start()
        logger.info("consistent_read", extra={
            "consistency": answer.consistency, "lease_id": lease_id,
            "versions": {n: (v.barrier, v.snapshot_id) for n, v in answer.versions.items()}})
        yield frames
    finally:
        if renewer is not None:
            renewer.stop()
        if lease_id is not None:
            try:
                client.release_lease(lease_id)
            except MetaServiceError:
                logger.warning("lease_release_failed", extra={"lease_id": lease_id},
                               exc_info=True)


def _lease_separately(client: MetaServiceClient, holder: str, ttl: float,
                      versions: dict[str, TableVersion]) -> str | None:
    """For a server that answers versions without leasing them: lease right after. Between the
    two calls the snapshots are still protected as the components' current strong cut or as
    table heads in the common case; a server without leases at all only gets a warning."""
    try:
        return client.create_lease(holder, ttl, {n: v.snapshot_id
                                                 for n, v in versions.items()}).lease_id
    except NotFoundError as exc:
        if exc.code != "not_found":
            raise
        logger.warning("leases_unsupported", extra={"server": client.base_url})
        return None
