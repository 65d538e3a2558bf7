"""The options of the ``metaservice`` data source (docs/contract.md#the-spark-plugin), validated
where they are given.

Spark hands a Python data source its options with lower-cased keys; every key here is matched
case-insensitively. Values are strings, as Spark passes them.

Common to every use:
    ``metaservice.url``    the server (default ``$METASERVICE_URL``)
    ``metaservice.token``  a bearer token (default ``$METASERVICE_TOKEN``); never logged
    ``table``              ``catalog.database.table``; the catalog is found by name: in
                           Spark's configuration when the format was registered
                           (``spark.sql.catalog.<catalog>.*``), then in pyiceberg's
                           configuration, else it is the server's built-in catalog
                           (``<metaservice.url>/iceberg``, with ``metaservice.token``)

Streaming source (``spark.readStream``):
    ``job``                the job id (required): one job may have several sources in one query
    ``startingBarrier``    ``latest`` (default), ``earliest`` or a barrier number: where a query
                           without a checkpoint starts (a checkpoint always wins)
    ``maxFilesPerTrigger`` the default read limit (a barrier is never split: see source.py)
    ``maxPartitionBytes``  bytes of data files per Spark partition (default 128 MiB)

Streaming sink (``writeStream``):
    ``job``                the job id (required)
    ``checkpointLocation`` required: the sink reads Spark's offset log to know the barrier of a
                           micro-batch, so a replay commits the same barrier

Batch read (``spark.read``):
    ``consistency``        ``strong`` (default) or ``weak``
    ``barrier``            read exactly this barrier instead (a reproducible read)
    ``leaseSeconds``       lease the snapshot read for this long from ``load()`` (default 3600;
                           ``0``: no lease)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_plugin._errors import OptionError
from spark_plugin._iceberg.catalogs import CatalogSpec, find_catalog
from spark_plugin._names import TableName, validate_job_id

URL_OPTION = "metaservice.url"
TOKEN_OPTION = "metaservice.token"

DEFAULT_PARTITION_BYTES = 128 * 1024 * 1024
DEFAULT_LEASE_SECONDS = 3600.0


def lower_keys(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


@dataclass(frozen=True)
class Connection:
    """Where the server is. ``repr`` never shows the token."""

    url: str
    token: str | None = None

    def __repr__(self) -> str:
        return f"Connection({self.url!r})"

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Connection:
        url = options.get(URL_OPTION) or os.environ.get("METASERVICE_URL")
        if not url:
            raise OptionError(f"no MetaService URL: set .option({URL_OPTION!r}, ...) or "
                              "METASERVICE_URL")
        token = options.get(TOKEN_OPTION) or os.environ.get("METASERVICE_TOKEN") or None
        return cls(url.rstrip("/"), token)


def _table(options: Mapping[str, str]) -> str:
    value = options.get("table")
    if not value:
        raise OptionError("option 'table' is required (catalog.database.table)")
    try:
        return str(TableName.parse(value))
    except ValueError as exc:
        raise OptionError(str(exc)) from None


def _catalog(table: str, connection: Connection,
             catalog_conf: Mapping[str, str] | None) -> CatalogSpec:
    """The table's catalog (see ``spark_plugin._iceberg.catalogs``): ``catalog_conf`` is the
    Spark configuration captured when the format was registered (Spark's Python workers have
    no session to ask)."""
    return find_catalog(TableName.parse(table).catalog, conf=dict(catalog_conf or {}),
                        url=connection.url, token=connection.token)


def _job(options: Mapping[str, str], role: str) -> str:
    value = options.get("job")
    if not value:
        raise OptionError(f"option 'job' is required for a streaming {role}")
    try:
        return validate_job_id(value)
    except ValueError as exc:
        raise OptionError(str(exc)) from None


def _positive_int(options: Mapping[str, str], key: str) -> int | None:
    raw = options.get(key.lower())
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {key!r} must be an integer, not {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {key!r} must be > 0")
    return value


def starting_barrier(options: Mapping[str, str]) -> str | int:
    raw = (options.get("startingbarrier") or "latest").strip().lower()
    if raw in ("latest", "earliest"):
        return raw
    try:
        value = int(raw)
    except ValueError:
        raise OptionError("option 'startingBarrier' must be latest, earliest or a barrier "
                          f"(ms since the epoch), not {raw!r}") from None
    if value < 0:
        raise OptionError("option 'startingBarrier' must be >= 0")
    return value


@dataclass(frozen=True)
class SourceOptions:
    connection: Connection
    job: str
    table: str
    starting_barrier: str | int = "latest"
    max_files_per_trigger: int | None = None
    max_partition_bytes: int = DEFAULT_PARTITION_BYTES
    catalog: CatalogSpec | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any],
              catalog_conf: Mapping[str, str] | None = None) -> SourceOptions:
        o = lower_keys(options)
        connection, table = Connection.from_options(o), _table(o)
        return cls(connection, _job(o, "source"), table,
                   starting_barrier(o), _positive_int(o, "maxFilesPerTrigger"),
                   _positive_int(o, "maxPartitionBytes") or DEFAULT_PARTITION_BYTES,
                   _catalog(table, connection, catalog_conf))


@dataclass(frozen=True)
class SinkOptions:
    connection: Connection
    job: str
    table: str
    checkpoint_location: str
    catalog: CatalogSpec | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any],
              catalog_conf: Mapping[str, str] | None = None) -> SinkOptions:
        o = lower_keys(options)
        checkpoint = o.get("checkpointlocation")
        if not checkpoint:
            raise OptionError(
                "the metaservice sink needs .option('checkpointLocation', ...) on the "
                "writeStream: it reads Spark's offset log there to commit each micro-batch at "
                "its barrier exactly once (spark.sql.streaming.checkpointLocation is not enough)")
        connection, table = Connection.from_options(o), _table(o)
        return cls(connection, _job(o, "sink"), table, checkpoint,
                   _catalog(table, connection, catalog_conf))


@dataclass(frozen=True)
class BatchReadOptions:
    connection: Connection
    table: str
    consistency: str = "strong"
    barrier: int | None = None
    lease_seconds: float | None = DEFAULT_LEASE_SECONDS
    max_partition_bytes: int = DEFAULT_PARTITION_BYTES
    catalog: CatalogSpec | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any],
              catalog_conf: Mapping[str, str] | None = None) -> BatchReadOptions:
        o = lower_keys(options)
        consistency = (o.get("consistency") or "strong").strip().lower()
        if consistency not in ("strong", "weak"):
            raise OptionError(f"option 'consistency' must be strong or weak, not {consistency!r}")
        barrier = None
        if o.get("barrier"):
            try:
                barrier = int(o["barrier"])
            except ValueError:
                raise OptionError(f"option 'barrier' must be an integer, not {o['barrier']!r}") \
                    from None
        lease: float | None = DEFAULT_LEASE_SECONDS
        if o.get("leaseseconds") not in (None, ""):
            try:
                lease = float(o["leaseseconds"])
            except ValueError:
                raise OptionError("option 'leaseSeconds' must be a number") from None
            lease = None if lease <= 0 else lease
        connection, table = Connection.from_options(o), _table(o)
        return cls(connection, table, consistency, barrier, lease,
                   _positive_int(o, "maxPartitionBytes") or DEFAULT_PARTITION_BYTES,
                   _catalog(table, connection, catalog_conf))
