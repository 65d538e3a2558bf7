"""``spark.readStream.format("metaservice_native")``: the streaming source with each barrier's
files read by Spark's own Parquet reader.

The ``metaservice`` source is a Python data source: its rows reach Spark as Arrow batches from
Python workers, which costs each micro-batch the scheduling of Python tasks and the hand-off
(docs/benchmarks.md, *The streaming source*). This one is a small JVM source (``jvm/``, the
jar ``.cache/jars/plugin-jvm/metaservice-spark-plugin.jar`` on the driver's classpath) that
asks this module, in the driver's Python process through Py4J, for everything it knows about
barriers: the same :class:`~spark_plugin.streaming.source.BarrierStreamReader` answers its
offsets and commits, so barrier alignment, the registration batch, ``Trigger.AvailableNow``,
restarts and exactly-once with the ``metaservice`` sink are the ``metaservice`` source's own.
A micro-batch's rows are a batch DataFrame of the barrier's files:

- files Spark can read as they are (no delete files, columns matched by name or Parquet field
  id, see ``spark_plugin/_iceberg/reads.py``) on a local disk or HDFS: ``spark.read.parquet``
  of exactly those files, which the JVM source marks as streaming, so the query plans Spark's
  file scan (vectorized reads, column pruning, filter pushdown);
- anything else (delete files, type promotions, tables on an object store, whose files the
  plugin reads with pyiceberg's FileIO and the table's vended credentials): the ``metaservice``
  source's Python tasks.

The options are the ``metaservice`` source's (``job``, ``table``, ``startingBarrier``,
``maxFilesPerTrigger``...). :func:`~spark_plugin.streaming.register_data_source` registers the
planner factory with the JVM when the jar is on the driver's classpath.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

from spark_plugin.streaming.options import SourceOptions

logger = logging.getLogger(__name__)

FORMAT = "metaservice_native"
PROVIDER_CLASS = "io.metaservice.spark.NativeBarrierSourceProvider"

# The factories registered with a JVM, by the gateway's id: Py4J's Python side holds only weak
# references to callback objects; the JVM's calls would find them collected.
_registered: dict[int, Any] = {}


def provider_class(spark: Any) -> Any | None:
    """The JVM provider class of the source, or ``None`` when its jar is not on the driver's
    classpath (or the session has no JVM here: Spark Connect)."""
    jvm = getattr(getattr(spark, "sparkContext", None), "_jvm", None) if hasattr(
        spark, "_jsparkSession") else None
    if jvm is None:
        return None
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        return jvm.java.lang.Class.forName(PROVIDER_CLASS, True, loader)
    except Exception:  # noqa: BLE001 - py4j raises Py4JJavaError (ClassNotFoundException)
        return None


def register_native_source(spark: Any, catalog_conf: Mapping[str, str]) -> bool:
    """Register the planner factory with the driver's JVM, if the source's jar is there.
    Returns whether ``format("metaservice_native")`` is available in this session."""
    if provider_class(spark) is None:
        return False
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)
    factory = PlannerFactory(spark, dict(catalog_conf))
    gateway.jvm.io.metaservice.spark.NativeBarrierSourceProvider.register(factory)
    _registered[id(gateway)] = factory
    return True


class PlannerFactory:
    """``io.metaservice.spark.BarrierPlannerFactory``, called by the JVM source's provider."""

    class Java:
        implements = ["io.metaservice.spark.BarrierPlannerFactory"]

    def __init__(self, spark: Any, catalog_conf: dict[str, str]) -> None:
        self.spark = spark
        self.catalog_conf = catalog_conf

    def _options(self, options: Any) -> SourceOptions:
        return SourceOptions.parse(dict(options), self.catalog_conf)

    def schemaJson(self, options: Any) -> str:  # noqa: N802 - the Java interface's name
        """At ``load()``: register the source's edge (as the ``metaservice`` source does) and
        answer the table's schema."""
        from spark_plugin._iceberg import load_table
        from spark_plugin._spark_io import FIELD_ID_READ_CONF, iceberg_schema_to_spark
        from spark_plugin.streaming.connections import client_for
        from spark_plugin.streaming.lifecycle import remember_job

        o = self._options(options)
        client_for(o.connection).register_source(o.job, o.table)
        remember_job(o.job, o.connection.url)
        # Files are matched to columns by Parquet field id where the table's history needs it.
        # Set before the query starts: the query runs in a clone of this session, made then.
        # (The setting only applies to reads whose requested schema carries field ids.)
        self.spark.conf.set(FIELD_ID_READ_CONF, "true")
        schema = load_table(o.table, o.catalog).schema()
        logger.info("stream_source_registered", extra={"job": o.job, "table": o.table,
                                                       "format": FORMAT})
        return str(iceberg_schema_to_spark(schema).json())

    def create(self, options: Any) -> NativePlanner:
        from spark_plugin._iceberg import load_table
        from spark_plugin._spark_io import iceberg_schema_to_spark
        from spark_plugin.streaming.source import BarrierStreamReader

        o = self._options(options)
        schema = load_table(o.table, o.catalog).schema()
        reader = BarrierStreamReader(o, schema.model_dump_json(),
                                     iceberg_schema_to_spark(schema).json())
        return NativePlanner(self.spark, reader)


class NativePlanner:
    """``io.metaservice.spark.BarrierPlanner``: one source of a running query."""

    class Java:
        implements = ["io.metaservice.spark.BarrierPlanner"]

    def __init__(self, spark: Any, reader: Any) -> None:
        self.spark = spark
        self.reader = reader
        # the plan of the micro-batch whose end offset was just answered, made while Spark
        # writes that offset to its log: (start, end) -> the plan
        self._planning: tuple[tuple[str | None, str], Future[Any]] | None = None
        self._planner = ThreadPoolExecutor(max_workers=1,
                                           thread_name_prefix="metaservice-native-planning")

    def _offset(self, json_text: str | None) -> dict[str, Any]:
        return json.loads(json_text) if json_text is not None else self.reader.initialOffset()

    def latestOffset(self, start_json: str | None,  # noqa: N802 - the Java interface's name
                     max_files: int) -> str | None:
        self._forget_planning()
        start = self._offset(start_json)
        limit = ReadMaxFiles(max_files) if max_files > 0 else ReadAllAvailable()
        end = self.reader.latestOffset(start, limit)
        if end == start:
            # nothing new: Spark compares offsets by their JSON, so answer the very same text
            return start_json
        end_json = json.dumps(end)
        self._planning = ((start_json, end_json),
                          self._planner.submit(self._plan, start_json, end_json))
        return end_json

    def _plan(self, start_json: str | None, end_json: str) -> tuple[Any, Any] | None:
        return self.reader.plan_between(self._offset(start_json), json.loads(end_json),
                                        allow_native=True)

    def _forget_planning(self) -> None:
        """Drop the plan made in the background, once it is done: the reader's table is never
        used by two threads."""
        if self._planning is not None:
            _, pending = self._planning
            self._planning = None
            _settle(pending)

    def _planned(self, start_json: str | None, end_json: str) -> tuple[Any, Any] | None:
        """The plan between two offsets: the one made in the background for exactly these
        offsets, else made now (a replay after a restart asks for logged offsets)."""
        planning, self._planning = self._planning, None
        if planning is not None:
            key, pending = planning
            if key == (start_json, end_json):
                return pending.result()
            _settle(pending)
        return self._plan(start_json, end_json)

    def batch(self, start_json: str | None, end_json: str) -> Any:
        """The micro-batch's rows: the files for Spark to scan (the schema to read them with as
        Spark's JSON, then a file per line), or a batch DataFrame of them (its JVM object)."""
        from spark_plugin._spark_io import iceberg_schema_to_spark, is_object_store

        reader = self.reader
        spark_schema = iceberg_schema_to_spark(_schema(reader.schema_json))
        planned = self._planned(start_json, end_json)
        if planned is None or not planned[1].file_paths:
            return self.spark.createDataFrame([], spark_schema)._jdf
        table, plan = planned
        if (plan.method == "native" and not is_object_store(table.location())
                and not any("\n" in path for path in plan.file_paths)):
            read_schema = iceberg_schema_to_spark(_schema(reader.schema_json),
                                                  with_ids=plan.by_field_id)
            logger.debug("stream_batch_native", extra={"table": plan.table,
                                                       "files": len(plan.file_paths)})
            return "\n".join([read_schema.json(), *plan.file_paths])
        return self._read_in_tasks(table, plan, spark_schema)._jdf

    def _read_in_tasks(self, table: Any, plan: Any, spark_schema: Any) -> Any:
        """The ``metaservice`` source's read: its partitions, one Spark task each."""
        from spark_plugin.streaming.source import partitions_of

        reader = self.reader
        partitions = partitions_of(reader.options.table, table, plan, reader.schema_json,
                                   reader.spark_schema_json, reader.options.max_partition_bytes)
        logger.debug("stream_batch_tasks", extra={"table": plan.table, "reason": plan.reason,
                                                  "tasks": len(partitions)})
        read = functools.partial(_read_partitions, partitions)
        return self.spark.range(0, len(partitions), 1, len(partitions)).mapInArrow(
            read, spark_schema)

    def commit(self, end_json: str) -> None:
        self.reader.commit(json.loads(end_json))

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - the Java interface's name
        self.reader.prepareForTriggerAvailableNow()

    def maxFilesPerTrigger(self) -> int:  # noqa: N802 - the Java interface's name
        return int(self.reader.options.max_files_per_trigger or 0)

    def stop(self) -> None:
        self._forget_planning()
        self._planner.shutdown(wait=False)
        self.reader.stop()


def _settle(pending: Future[Any]) -> None:
    """Cancel ``pending``, or wait until it is done (its outcome is not wanted)."""
    if not pending.cancel():
        pending.exception()


def _schema(schema_json: str) -> Any:
    from pyiceberg.schema import Schema

    return Schema.model_validate_json(schema_json)


def _read_partitions(partitions: list[Any], ids: Iterator[Any]) -> Iterator[Any]:
    """A Spark task of :meth:`NativePlanner._read_in_tasks` (in a Python worker)."""
    from spark_plugin.streaming.source import read_partition

    for batch in ids:
        for index in batch.column(0).to_pylist():
            yield from read_partition(partitions[index])
