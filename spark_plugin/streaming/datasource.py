"""The ``metaservice`` Spark data source: streaming source and sink, and batch reads.

One ``DataSource`` class serves the three uses; which one is meant shows in the options:
a streaming read names a ``job``, a batch read does not (and asks for a ``consistency``).
Options are validated on the driver, where they are given (``options.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_plugin._iceberg import load_table
from spark_plugin.streaming.options import (
    BatchReadOptions,
    OptionError,
    SinkOptions,
    SourceOptions,
    lower_keys,
)

logger = logging.getLogger(__name__)

FORMAT = "metaservice"


def _spark_schema(schema_json: str) -> StructType:
    from pyiceberg.schema import Schema

    from spark_plugin._spark_io import iceberg_schema_to_spark

    return iceberg_schema_to_spark(Schema.model_validate_json(schema_json))


class MetaServiceDataSource(DataSource):
    """``spark.readStream/readStream/read.format("metaservice")``; see the package docstring.

    ``catalog_conf`` holds the ``spark.sql.catalog.*`` settings of the session the format was
    registered with (:func:`with_catalog_conf`): the data source runs in Spark's Python workers,
    which have no session to read them from. ``prunes_by_filters`` says whether that session's
    Spark keeps a filter pushdown with the one scan it was made for
    (:func:`spark_plugin.streaming.pushdown.pushdown_is_scoped_to_its_scan`): only then does a
    batch read prune by the filters Spark pushes.
    """

    catalog_conf: tuple[tuple[str, str], ...] = ()
    prunes_by_filters: bool = False

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._schema_json: str | None = None
        self._version: Any = None

    def _conf(self) -> dict[str, str]:
        return dict(self.catalog_conf)

    def _is_stream_source(self) -> bool:
        return "job" in lower_keys(self.options)

    def schema(self) -> StructType:
        """Called when ``load()`` plans the DataFrame: plan time. A streaming source registers
        its job's edge here; a batch read resolves the version it will read."""
        from spark_plugin.streaming.lifecycle import remember_job

        if self._is_stream_source():
            o = SourceOptions.parse(self.options, self._conf())
            from spark_plugin.streaming.connections import client_for

            client_for(o.connection).register_source(o.job, o.table)
            remember_job(o.job, o.connection.url)
            self._schema_json = load_table(o.table, o.catalog).schema().model_dump_json()
            logger.info("stream_source_registered", extra={"job": o.job, "table": o.table})
        else:
            from spark_plugin.streaming.batch_read import resolve_version

            self._version = resolve_version(BatchReadOptions.parse(self.options, self._conf()))
            self._schema_json = self._version.schema_json
        return _spark_schema(self._schema_json)

    def _schema_or_load(self, o: SourceOptions) -> str:
        if self._schema_json is None:
            self._schema_json = load_table(o.table, o.catalog).schema().model_dump_json()
        return self._schema_json

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from spark_plugin.streaming.source import BarrierStreamReader

        if not self._is_stream_source():
            raise OptionError("option 'job' is required for a streaming read of metaservice")
        o = SourceOptions.parse(self.options, self._conf())
        return BarrierStreamReader(o, self._schema_or_load(o), schema.json())

    def reader(self, schema: StructType) -> DataSourceReader:
        from spark_plugin.streaming.batch_read import (
            ConsistentBatchReader,
            PruningBatchReader,
            resolve_version,
        )

        if self._is_stream_source():
            raise OptionError("option 'job' marks a streaming source: use spark.readStream, or "
                              "drop it for a batch read (options consistency, barrier)")
        o = BatchReadOptions.parse(self.options, self._conf())
        if self._version is None:
            self._version = resolve_version(o)
        reader = PruningBatchReader if self.prunes_by_filters else ConsistentBatchReader
        return reader(o, self._version, schema.json())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Called when Spark plans a micro-batch (and again to commit it): the sink registers
        its edge here, idempotently."""
        from spark_plugin._executor_tables import TableHandle
        from spark_plugin.streaming.connections import client_for
        from spark_plugin.streaming.lifecycle import remember_job
        from spark_plugin.streaming.sink import BarrierStreamWriter

        o = SinkOptions.parse(self.options, self._conf())
        client_for(o.connection).register_sink(o.job, o.table)
        remember_job(o.job, o.connection.url)
        table = load_table(o.table, o.catalog)
        return BarrierStreamWriter(o, overwrite, TableHandle.of(o.table, table))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        raise OptionError("batch writes through format('metaservice') are not supported: use "
                          "spark_plugin.BarrierJob (a job) or spark_plugin.append_root (ingestion)")


def with_catalog_conf(catalog_conf: Mapping[str, str], *,
                      prunes_by_filters: bool = False) -> type[MetaServiceDataSource]:
    """The data source class to register for a session whose catalog settings are
    ``catalog_conf`` (and whose Spark scopes filter pushdown to a scan, when
    ``prunes_by_filters``): a subclass carrying them, which Spark ships to its Python workers by
    value (it is not importable by name)."""
    if not catalog_conf and not prunes_by_filters:
        return MetaServiceDataSource
    return type("MetaServiceDataSource", (MetaServiceDataSource,), {
        "__module__": __name__, "__qualname__": "MetaServiceDataSource.with_catalog_conf",
        "__doc__": MetaServiceDataSource.__doc__,
        "catalog_conf": tuple(sorted((str(k), str(v)) for k, v in catalog_conf.items())),
        "prunes_by_filters": prunes_by_filters})
