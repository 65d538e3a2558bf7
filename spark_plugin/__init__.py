"""spark_plugin: Spark jobs and OLAP reads that stay consistent across Iceberg tables.

The public surface (docs/contract.md#the-spark-plugin)::

    import spark_plugin as sp

    client = sp.MetaServiceClient("http://127.0.0.1:8000", token=None)
    sp.append_root(spark, df, "lake.db.orders", client=client, catalog=catalog)
    with sp.BarrierJob(spark, "enrich", sources=[...], sinks=[...], client=client) as job:
        for step in job.available():   # or job.next() / job.wait_next() for a long-running job
            ...
            step.commit()
    with sp.consistent_read(spark, ["lake.db.a", "lake.db.b"], client=client) as frames:
        ...
    sp.expire_snapshots("lake.db.orders", older_than=timedelta(hours=1), client=client)
    sp.rollback_tables(plan, catalog=catalog, client=client)   # a rollback plan, on Iceberg
    sp.register_data_source(spark)   # format("metaservice"): streaming source, sink, batch reads
    sp.open_read_session(spark, "lake_strong")  # Spark with Iceberg's runtime: SQL reads one cut
    barrier = sp.barrier_after(latest)  # the wall-clock rule, for writers choosing their barrier
    SparkSession.builder.config("spark.jars", sp.plugin_jars())  # the plugin's JVM part

Tables are named ``<catalog>.<database>.<table>``, as Spark SQL writes them: a namespace of
several levels one part each (``lake.a.b.t``), a part beyond letters, digits, ``_`` and ``-`` in
backticks (``lake.`sales dept`.`eu.west`.`orders été```); :class:`TableName` reads and writes
them. Where no ``catalog`` argument is given, the catalog is found by that name: in Spark's
configuration (``spark.sql.catalog.<catalog>.*``), then in pyiceberg's (``~/.pyiceberg.yaml``,
``PYICEBERG_CATALOG__<CATALOG>__*``), else it is MetaService's built-in Iceberg catalog
(``<server url>/iceberg``), whose commits record their barrier themselves. :class:`CatalogSpec`
names a catalog and how to open it.

Every exception the plugin raises derives from :class:`MetaServiceError`, and every error code
the server answers has its own class; the tree is drawn in ``spark_plugin._errors``. pyspark is
imported only by the functions that need it, so the client and the Iceberg layer work without
it.
"""

from typing import Any

from spark_plugin import _errors
from spark_plugin._barriers import barrier_after, barrier_text
from spark_plugin._batch_job import BarrierJob, BarrierStep
from spark_plugin._client import DEFAULT_TIMEOUT, MetaServiceClient
from spark_plugin._consistent_read import ConsistentFrames, consistent_read

# The exception classes: the names of ``spark_plugin._errors.__all__``, listed there only.
from spark_plugin._errors import *  # noqa: F403
from spark_plugin._iceberg.catalogs import CatalogSpec
from spark_plugin._jvm import plugin_jars
from spark_plugin._models import Commit, Position, TableVersion, Versions
from spark_plugin._names import TableName
from spark_plugin._read_sessions import open_read_session, open_view
from spark_plugin._root import append_root, heartbeat_root
from spark_plugin._spark_io import create_table_from_spark_schema
from spark_plugin.maintenance import ExpirationSummary, expire_snapshots
from spark_plugin.rollback import RolledBackTable, rollback_tables

__version__ = "0.1.0"


def register_data_source(spark: Any, *, url: str | None = None,
                         token: str | None = None) -> Any:
    """Register the ``metaservice`` format with ``spark`` (Structured Streaming source and sink,
    batch reads) and the listener that unregisters a query's jobs when it terminates; see
    :mod:`spark_plugin.streaming`. Imported lazily: it needs pyspark.

    Raises:
        WorkerImportError: Spark's Python workers cannot import the plugin (checked once per
            Spark application).
    """
    from spark_plugin.streaming import register_data_source as register

    return register(spark, url=url, token=token)


__all__ = [
    "BarrierJob",
    "BarrierStep",
    "CatalogSpec",
    "Commit",
    "ConsistentFrames",
    "DEFAULT_TIMEOUT",
    "ExpirationSummary",
    "MetaServiceClient",
    "Position",
    "RolledBackTable",
    "TableName",
    "TableVersion",
    "Versions",
    "append_root",
    "barrier_after",
    "barrier_text",
    "consistent_read",
    "create_table_from_spark_schema",
    "expire_snapshots",
    "heartbeat_root",
    "open_read_session",
    "open_view",  # deprecated: open_read_session
    "plugin_jars",
    "register_data_source",
    "rollback_tables",
]
__all__ += _errors.__all__  # the exception classes

# Public classes show as ``spark_plugin.X`` (in tracebacks, reprs and pickles), not as the
# private module that defines them, as httpx does.
for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type) and issubclass(_value, BaseException):
        _value.__module__ = "spark_plugin"
del _name, _value
