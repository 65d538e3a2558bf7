"""Structured Streaming in Spark's own idiom: the ``metaservice`` data source
(docs/contract.md#the-spark-plugin).

    import spark_plugin as sp
    sp.register_data_source(spark)
    (spark.readStream.format("metaservice").option("job", "enrich")
          .option("table", "lake.db.orders").load()
       ...
       .writeStream.format("metaservice").option("job", "enrich")
          .option("table", "lake.db.orders_enriched")
          .option("checkpointLocation", path).start())

A micro-batch is one aligned barrier. The pieces, each in the module named after its idea:

- ``options``      the options and their validation;
- ``offsets``      the source's offsets: the job, its barrier, the snapshots of its sources;
- ``checkpoint``   Spark's offset log (the barrier of a batch) and the sink's staged output;
- ``source``       the streaming reader: barriers from the service, files from Iceberg;
- ``native_source`` ``metaservice_native``: the same source, its files read by Spark's own
                   Parquet reader (a JVM source, ``jvm/``, asking ``source`` through Py4J);
- ``sink``         the streaming writer: one tagged Iceberg commit per barrier, then the report,
                   exactly once across crashes;
- ``lifecycle``    registration at plan time, start at the first offset request, unregistration
                   by a ``StreamingQueryListener`` when the query terminates;
- ``batch_read``   ``spark.read.format("metaservice")`` at a strong/weak/explicit version.

How executors open tables, read scan tasks and write data files without a catalog is
``spark_plugin._executor_tables`` (batch writes use it too).

The test hook that kills the driver at named points of the source and sink is
``spark_plugin._crash_points`` (the batch job's commit has one too).
"""

from __future__ import annotations

from typing import Any

from spark_plugin.streaming.datasource import FORMAT, MetaServiceDataSource, with_catalog_conf


def register_data_source(spark: Any, *, url: str | None = None,
                         token: str | None = None) -> Any:
    """Register the ``metaservice`` format with ``spark`` (and ``metaservice_native``, the
    streaming source read by Spark's own Parquet reader, when :func:`native_source_jar` is on
    the driver's classpath) and install the listener that unregisters a streaming query's jobs
    when it terminates (once per session).

    First checks, once per Spark application, that Spark's Python workers can import the plugin
    (the format runs there), and captures the session's catalog settings
    (``spark.sql.catalog.*``) for the format's table lookups. On a Spark that keeps a Python
    data source's filter pushdown with its scan, turns that pushdown on
    (``spark.sql.python.filterPushdown.enabled``) unless the session turned it off: a batch read
    then plans only the files a query's filters may need (``spark_plugin/streaming/pushdown.py``,
    which says why not on Spark 4.1.1 and 4.2.0).

    Args:
        spark: the SparkSession.
        url: the server the listener talks to when a job's own URL is unknown (default
            ``$METASERVICE_URL``).
        token: the token the listener unregisters with (default ``$METASERVICE_TOKEN``).

    Returns:
        The listener (``StreamingJobsListener``).

    Raises:
        WorkerImportError: Spark's Python workers cannot import ``spark_plugin``.
    """
    from spark_plugin._iceberg.catalogs import spark_conf
    from spark_plugin._workers import require_plugin_on_workers
    from spark_plugin.streaming.lifecycle import install_listener
    from spark_plugin.streaming.native_source import register_native_source
    from spark_plugin.streaming.pushdown import PUSHDOWN_CONF, pushdown_is_scoped_to_its_scan

    require_plugin_on_workers(spark)
    prunes = (pushdown_is_scoped_to_its_scan(spark)
              and str(spark.conf.get(PUSHDOWN_CONF, None) or "true").strip().lower() == "true")
    if prunes:
        spark.conf.set(PUSHDOWN_CONF, "true")
    catalog_conf = spark_conf(spark)
    spark.dataSource.register(with_catalog_conf(catalog_conf, prunes_by_filters=prunes))
    register_native_source(spark, catalog_conf)
    return install_listener(spark, url, token)


def native_source_jar() -> str:
    """The jar of the ``metaservice_native`` source (the plugin's jar,
    :func:`spark_plugin._jvm.plugin_jar`). A session names :func:`spark_plugin.plugin_jars` in
    ``spark.jars``: this jar and the AWS bundle the plugin writes object stores with.

    Raises:
        FileNotFoundError: no jar there (the message says how to build it).
    """
    from spark_plugin._jvm import plugin_jar

    return str(plugin_jar())


__all__ = ["FORMAT", "MetaServiceDataSource", "native_source_jar", "register_data_source"]
