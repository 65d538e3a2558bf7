"""The Spark side of the Iceberg layer: schemas both ways, DataFrames written as Iceberg data
files, and read plans executed as DataFrames.

Writing (``write_data_files``):
    Unpartitioned tables on a filesystem (a local path, ``file:``, HDFS) are written by Spark's
    native Parquet writer straight into the table's data location: every column is cast to the
    Spark type of its Iceberg column and carries the Iceberg field id (``parquet.field.id``),
    timestamps are written as INT64 microseconds (``TimestampType`` for Iceberg
    ``timestamptz``, ``TimestampNTZType`` for ``timestamp``; never INT96), required columns are
    written as required and fail the job on a null; dates and timestamps are never rebased to
    another calendar; files are laid out as the table's properties say, with Iceberg's defaults
    (row groups, pages, dictionaries, bloom filters, the codec and its level; given to Spark's
    writer as parquet-mr's settings by the plugin's JVM part, ``ParquetLayout``; a session
    without the plugin's jar gets the codec only). Unpartitioned tables on an object store
    (``s3://``) are written in the JVM when the session has the plugin's jars
    (:func:`spark_plugin.plugin_jars`): each task
    writes the files that Spark's Parquet writer would, laid out as the table's properties say,
    locally, and uploads each with one PUT, with the credentials the catalog vended for the
    table's prefix (``write_from_jvm``, ``jvm/.../ObjectStoreWriter.java``). Partitioned
    tables, tables with required fields inside nested columns or a codec the JVM lacks (Brotli,
    LZO), and object-store tables in a session without the jars (or with remote signing
    instead of credentials) are written in Spark's tasks by
    pyiceberg's writer in the Python workers (``write_from_tasks``): each task opens the table
    from its metadata file with the table's FileIO properties and answers the data files it
    wrote. Nothing is committed here: the result is a list of data files.

Reading (``dataframe_from_plan``):
    ``native`` plans of tables on a filesystem become ``spark.read.parquet`` over exactly the
    planned files, with an explicit schema (matched by field id when the plan says so, which
    needs ``spark.sql.parquet.fieldId.read.enabled=true``: set on the session on first use).
    ``native`` plans of tables on an object store are read in Spark's tasks by pyiceberg's Arrow
    scan (``read_from_tasks``), with the table's FileIO as above. ``arrow`` plans are read by
    pyiceberg on the driver and handed to Spark as Arrow.

Why not Hadoop's S3A on object stores: the credentials differ by table and expire, so Hadoop's
filesystem cache (one filesystem per bucket and JVM) must be off for those jobs, and then every
job builds new S3A filesystems that nobody closes (Spark's file sources do not): each one left
AWS SDK threads running for good, about 50 per write and 100 per read of a small table in the
driver's JVM alone (measured with Hadoop 3.5.0's S3A in pyspark 4.2.0). The JVM writer's S3
client and pyiceberg's FileIO are opened per task and closed with it, and a Spark without any
S3 setting writes and reads S3 tables.

pyspark is imported lazily so that the rest of the plugin works without it.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from spark_plugin._errors import UnsupportedSchemaError
from spark_plugin._executor_tables import io_properties
from spark_plugin._iceberg import (
    ReadPlan,
    data_files_from_footers,
    data_files_from_parquet,
    data_location,
    delete_files_quietly,
    qualified_name,
    read_arrow,
    resolve_catalog,
    scan_tasks,
    unsupported_columns,
)
from spark_plugin._jvm import object_store_writer, parquet_layout_settings
from spark_plugin._names import TableName

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

logger = logging.getLogger(__name__)

FIELD_ID_KEY = "parquet.field.id"
FIELD_ID_READ_CONF = "spark.sql.parquet.fieldId.read.enabled"


def _types() -> Any:
    try:
        from pyspark.sql import types
    except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
        raise ModuleNotFoundError(
            "this part of spark_plugin needs pyspark: pip install 'metaservice[spark]'") from exc
    return types


# -- schemas ----------------------------------------------------------------------------------


def iceberg_type_to_spark(t: Any, *, with_ids: bool = False) -> DataType:
    """The Spark type holding an Iceberg type (``timestamp`` → ``TimestampNTZType``,
    ``timestamptz`` → ``TimestampType``); nested struct fields carry their field ids when
    ``with_ids``."""
    from pyiceberg import types as it

    T = _types()
    simple = {
        it.BooleanType: T.BooleanType, it.IntegerType: T.IntegerType, it.LongType: T.LongType,
        it.FloatType: T.FloatType, it.DoubleType: T.DoubleType, it.DateType: T.DateType,
        it.TimestampType: T.TimestampNTZType, it.TimestamptzType: T.TimestampType,
        it.StringType: T.StringType, it.BinaryType: T.BinaryType, it.FixedType: T.BinaryType,
    }
    for iceberg_cls, spark_cls in simple.items():
        if isinstance(t, iceberg_cls):
            return spark_cls()
    if isinstance(t, it.DecimalType):
        return T.DecimalType(t.precision, t.scale)
    if isinstance(t, it.StructType):
        return T.StructType([_spark_field(f, with_ids) for f in t.fields])
    if isinstance(t, it.ListType):
        return T.ArrayType(iceberg_type_to_spark(t.element_type, with_ids=with_ids),
                           containsNull=not t.element_required)
    if isinstance(t, it.MapType):
        return T.MapType(iceberg_type_to_spark(t.key_type, with_ids=with_ids),
                         iceberg_type_to_spark(t.value_type, with_ids=with_ids),
                         valueContainsNull=not t.value_required)
    raise UnsupportedSchemaError(f"Iceberg type {t} has no Spark equivalent")


def _spark_field(f: Any, with_ids: bool) -> Any:
    T = _types()
    metadata = {FIELD_ID_KEY: f.field_id} if with_ids else {}
    return T.StructField(f.name, iceberg_type_to_spark(f.field_type, with_ids=with_ids),
                         nullable=not f.required, metadata=metadata)


def iceberg_schema_to_spark(schema: Schema, *, with_ids: bool = False) -> StructType:
    """The Spark schema of an Iceberg schema; with field ids in column metadata if asked."""
    T = _types()
    return T.StructType([_spark_field(f, with_ids) for f in schema.fields])


def spark_schema_to_iceberg(schema: StructType) -> Schema:
    """An Iceberg schema for a Spark schema (fresh field ids; ``nullable=False`` → required).

    Byte and short become ``int``; ``TimestampType`` becomes ``timestamptz`` and
    ``TimestampNTZType`` becomes ``timestamp``; char/varchar become ``string``.

    Raises:
        UnsupportedSchemaError: a type Iceberg cannot hold (interval, variant, ...).
    """
    from pyiceberg import types as it
    from pyiceberg.schema import Schema

    T = _types()
    counter = iter(range(1, 1_000_000))

    def convert(dt: Any) -> Any:
        if isinstance(dt, T.BooleanType):
            return it.BooleanType()
        if isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType)):
            return it.IntegerType()
        if isinstance(dt, T.LongType):
            return it.LongType()
        if isinstance(dt, T.FloatType):
            return it.FloatType()
        if isinstance(dt, T.DoubleType):
            return it.DoubleType()
        if isinstance(dt, T.DecimalType):
            return it.DecimalType(dt.precision, dt.scale)
        if isinstance(dt, T.DateType):
            return it.DateType()
        if isinstance(dt, T.TimestampNTZType):
            return it.TimestampType()
        if isinstance(dt, T.TimestampType):
            return it.TimestamptzType()
        if isinstance(dt, (T.StringType, T.CharType, T.VarcharType)):
            return it.StringType()
        if isinstance(dt, T.BinaryType):
            return it.BinaryType()
        if isinstance(dt, T.StructType):
            return it.StructType(*fields(dt))
        if isinstance(dt, T.ArrayType):
            return it.ListType(next(counter), convert(dt.elementType),
                               element_required=not dt.containsNull)
        if isinstance(dt, T.MapType):
            key_id, value_id = next(counter), next(counter)
            return it.MapType(key_id, convert(dt.keyType), value_id, convert(dt.valueType),
                              value_required=not dt.valueContainsNull)
        raise UnsupportedSchemaError(f"Spark type {dt.simpleString()} has no Iceberg equivalent")

    def fields(struct: Any) -> list[Any]:
        ids = [next(counter) for _ in struct.fields]
        return [it.NestedField(i, f.name, convert(f.dataType), required=not f.nullable)
                for i, f in zip(ids, struct.fields, strict=True)]

    return Schema(*fields(schema))


_TRANSFORM = re.compile(r"^\s*(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?([^\s)]+)\s*\)\s*$")


def _partition_spec(schema: Schema, partition_by: Sequence[str]) -> Any:
    """A partition spec from ``["col", "day(ts)", "bucket(16, id)", "truncate(4, s)"]``."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import (
        BucketTransform,
        DayTransform,
        HourTransform,
        IdentityTransform,
        MonthTransform,
        TruncateTransform,
        YearTransform,
    )

    fields = []
    for i, expr in enumerate(partition_by):
        match = _TRANSFORM.match(expr)
        if match:
            fn, arg, column = match.group(1).lower(), match.group(2), match.group(3)
        else:
            fn, arg, column = "identity", None, expr.strip()
        source = schema.find_field(column)
        transforms = {"identity": IdentityTransform, "year": YearTransform,
                      "month": MonthTransform, "day": DayTransform, "hour": HourTransform}
        if fn in transforms:
            transform = transforms[fn]()
        elif fn == "bucket" and arg:
            transform = BucketTransform(int(arg))
        elif fn == "truncate" and arg:
            transform = TruncateTransform(int(arg))
        else:
            raise ValueError(f"unknown partition transform {expr!r}")
        name = column if fn == "identity" else f"{column}_{fn}"
        fields.append(PartitionField(source_id=source.field_id, field_id=1000 + i,
                                     transform=transform, name=name))
    return PartitionSpec(*fields)


def create_table_from_spark_schema(
    table: str | TableName,
    schema: StructType | DataFrame,
    *,
    catalog: Any = None,
    partition_by: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    exist_ok: bool = False,
    client: Any = None,
) -> Table:
    """Create an Iceberg table whose columns are those of a Spark schema (or DataFrame).

    Args:
        table: ``catalog.database.table`` (a namespace of several levels written one part
            each, ``lake.a.b.t``); the namespace, and each level above it, is created if
            missing.
        schema: a Spark ``StructType``, or a DataFrame whose schema is used.
        catalog: a pyiceberg catalog (named like the table's first part), a
            :class:`~spark_plugin.CatalogSpec`, a mapping of names to either, or ``None`` to
            find it by name (Spark's configuration of the active session, pyiceberg's
            configuration, else MetaService's built-in catalog).
        partition_by: partition fields: ``"col"`` (identity), ``"day(ts)"``, ``"hour(ts)"``,
            ``"month(ts)"``, ``"year(ts)"``, ``"bucket(16, id)"``, ``"truncate(4, s)"``.
        properties: table properties.
        exist_ok: return the existing table instead of failing when it exists.
        client: the MetaService client whose server holds the built-in catalog (default:
            ``$METASERVICE_URL`` and ``$METASERVICE_TOKEN``).

    Returns:
        The pyiceberg table.
    """
    from pyiceberg.exceptions import TableAlreadyExistsError

    name = TableName.parse(table)
    struct: Any = getattr(schema, "schema", schema)  # a DataFrame's schema, or the StructType
    iceberg_schema = spark_schema_to_iceberg(struct)
    cat = resolve_catalog(name, catalog, client=client)
    for depth in range(1, len(name.namespace) + 1):  # a nested namespace needs its parents
        cat.create_namespace_if_not_exists(name.namespace[:depth])
    try:
        return cat.create_table(name.identifier, schema=iceberg_schema,
                                partition_spec=_partition_spec(iceberg_schema, partition_by),
                                properties=dict(properties or {}))
    except TableAlreadyExistsError:
        if exist_ok:
            return cat.load_table(name.identifier)
        raise


# -- writing ----------------------------------------------------------------------------------


@contextlib.contextmanager
def scoped_spark_conf(spark: SparkSession, values: Mapping[str, str]) -> Iterator[None]:
    """Set session confs for the duration of a block, then restore them. Not isolated from
    other threads using the same session at the same moment."""
    previous: dict[str, str | None] = {k: spark.conf.get(k, None) for k in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _has_nested_required(t: Any) -> bool:
    from pyiceberg import types as it

    if isinstance(t, it.StructType):
        return any(f.required or _has_nested_required(f.field_type) for f in t.fields)
    if isinstance(t, it.ListType):
        return t.element_required or _has_nested_required(t.element_type)
    if isinstance(t, it.MapType):
        return (t.value_required or _has_nested_required(t.key_type)
                or _has_nested_required(t.value_type))
    return False


def executor_write_reason(table: Table) -> str | None:
    """Why this table's files are written by pyiceberg's writer in the Spark tasks rather than
    by Spark's Parquet writer through Hadoop's filesystem (``None``: that writer). On an object
    store, the plugin's JVM writer may take them instead (see :func:`write_data_files`)."""
    if is_object_store(data_location(table)):
        return "object store"
    codec = table.metadata.properties.get("write.parquet.compression-codec", "").strip().lower()
    if codec in _PYICEBERG_CODECS:
        return f"codec {codec}"
    if not _spark_can_write(table):
        return "partitioned table" if table.spec().fields else (
            "required fields inside nested columns")
    return None


def _spark_can_write(table: Table) -> bool:
    """Whether Spark's Parquet writer writes this table's files as they must be: not for a
    partitioned table (one file per partition value, and the values to describe), nor for
    required fields inside nested columns (Spark's writer makes them optional)."""
    return not table.spec().fields and not any(_has_nested_required(f.field_type)
                                               for f in table.schema().fields)


def _zero(dt: Any) -> Column:
    """A non-null value of a Spark type (never used as data: only to make a column required)."""
    from pyspark.sql import functions as F

    T = _types()
    if isinstance(dt, T.StructType):
        return F.struct(*[(_zero(f.dataType) if not f.nullable else F.lit(None).cast(f.dataType))
                          .alias(f.name) for f in dt.fields])
    if isinstance(dt, T.ArrayType):
        return F.array().cast(dt)
    if isinstance(dt, T.MapType):
        return F.create_map().cast(dt)
    if isinstance(dt, (T.StringType,)):
        return F.lit("")
    if isinstance(dt, T.BinaryType):
        return F.lit(bytearray()).cast(dt)
    if isinstance(dt, T.BooleanType):
        return F.lit(False)
    if isinstance(dt, (T.DateType,)):
        return F.lit("1970-01-01").cast(dt)
    if isinstance(dt, (T.TimestampType, T.TimestampNTZType)):
        return F.lit(0).cast("timestamp").cast(dt)
    return F.lit(0).cast(dt)


def align_to_schema(df: DataFrame, schema: Schema, *, table: str = "") -> DataFrame:
    """``df`` with exactly the table's columns, in order, cast to their Spark types, carrying
    field ids; missing optional columns are null; required columns are non-nullable and fail
    the Spark job on a null.

    Raises:
        UnsupportedSchemaError: ``df`` has columns the table does not have, or lacks a required
            one.
    """
    from pyspark.sql import functions as F

    by_name = {f.name: f.dataType for f in df.schema.fields}
    wanted = [f.name for f in schema.fields]
    extra = [c for c in df.columns if c not in wanted]
    if extra:
        raise UnsupportedSchemaError(f"columns {extra} are not in table {table} "
                                     f"(columns: {wanted})")
    columns = []
    for f in schema.fields:
        spark_type = iceberg_type_to_spark(f.field_type, with_ids=True)
        if f.name in by_name:
            col = F.col(f"`{f.name}`")
            if by_name[f.name] != spark_type:  # (each cast costs Py4J round trips)
                col = col.cast(spark_type)
        elif f.required:
            raise UnsupportedSchemaError(f"required column {f.name!r} of {table} is missing")
        else:
            col = F.lit(None).cast(spark_type)
        if f.required:
            message = f"null in required column {f.name!r} of {table}"
            col = F.coalesce(col, F.raise_error(F.lit(message)).cast(spark_type),
                             _zero(spark_type))
        columns.append(col.alias(f.name, metadata={FIELD_ID_KEY: f.field_id}))
    return df.select(*columns)


PROLEPTIC_WRITES = {"spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
                    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED"}
"""Iceberg's dates and timestamps are proleptic Gregorian, whatever calendar the session would
rebase them to (LEGACY) or refuse them for (EXCEPTION)."""

_SPARK_CODECS = {"uncompressed": "none", "none": "none", "zstd": "zstd", "snappy": "snappy",
                 "gzip": "gzip", "lz4": "lz4", "lz4_raw": "lz4_raw", "brotli": "brotli"}


def write_data_files(spark: SparkSession, df: DataFrame, table: Table) -> list[DataFile]:
    """Write ``df`` as data files of ``table`` (not committed); see the module docstring."""
    name = qualified_name(table)
    schema = table.schema()
    bad = unsupported_columns(schema)
    if bad:
        raise UnsupportedSchemaError(f"{name}: columns {bad} have types Spark cannot hold")
    aligned = align_to_schema(df, schema, table=name)
    reason = executor_write_reason(table)
    if reason == "object store" and _spark_can_write(table):
        writer = object_store_writer(spark)
        storage = io_properties(table)
        if writer is not None and _jvm_can_write(data_location(table), storage,
                                                 table.metadata.properties):
            logger.info("object_store_write", extra={"table": name})
            try:
                return write_from_jvm(writer, aligned, table, storage)
            except _SdkMissingOnExecutors as missing:
                logger.warning("object_store_write_fallback", extra={
                    "table": name, "reason": str(missing)})
    if reason is not None:
        logger.info("executor_write", extra={"table": name, "reason": reason})
        return write_from_tasks(spark, aligned, table)
    paths = write_parquet(spark, aligned, table)
    files = data_files_from_parquet(table, paths)
    empty = [f.file_path for f in files if f.record_count == 0]
    delete_files_quietly(table, empty)
    return [f for f in files if f.record_count > 0]


def write_from_tasks(spark: SparkSession, aligned: DataFrame, table: Table) -> list[DataFile]:
    """Each Spark task writes its rows as the table's data files with pyiceberg's writer and
    the table's FileIO (``spark_plugin/_executor_tables.py``) and answers what it wrote; the
    data files of the tasks that succeeded. Timestamps reach the tasks labelled with the
    session's time zone; the tasks cast them to the table's types (the same instants)."""
    import pickle

    from spark_plugin._executor_tables import TableHandle

    _require_plugin_on_workers(spark)
    handle = TableHandle.of(qualified_name(table), table)
    answers = aligned.mapInArrow(functools.partial(_write_task, handle),
                                 "data_file binary").collect()
    return [pickle.loads(row.data_file) for row in answers]  # noqa: S301 - our tasks' answers


_PYICEBERG_CODECS = frozenset({"brotli", "lzo"})
"""Codecs Spark's jars have no codec for (parquet-mr's need native libraries): a table of one is
written by pyiceberg's writer, which has Brotli (Arrow has no LZO: pyiceberg refuses it)."""

_JVM_CODECS = frozenset({"zstd", "snappy", "gzip", "lz4", "uncompressed", "none"})
"""The codecs of parquet-mr in pyspark's jars that need no native library (not Brotli or LZO,
which pyiceberg's writer takes instead)."""


def _jvm_can_write(location: str, storage: Mapping[str, str],
                   properties: Mapping[str, str] | None = None) -> bool:
    """Whether the JVM writer can write to ``location`` with these FileIO settings and table
    ``properties``: an S3 location, credentials of its own (vended, or configured), not
    remote signing, which only pyiceberg's FileIO speaks (nor a setting the writer's
    one-line-per-setting hand-over cannot carry), and a codec it has."""
    codec = (properties or {}).get("write.parquet.compression-codec", "zstd").strip().lower()
    return (codec in _JVM_CODECS and urlsplit(location).scheme in ("s3", "s3a", "s3n")
            and "s3.access-key-id" in storage and "s3.secret-access-key" in storage
            and storage.get("s3.remote-signing-enabled", "false").lower() != "true"
            and not any("\t" in text or "\n" in text
                        for text in (*storage.keys(), *storage.values())))


class _SdkMissingOnExecutors(Exception):
    """The driver has the AWS SDK but the executors do not: the write goes through
    pyiceberg in the Python workers instead."""


_SDK_MISSING = ("metaservice: the AWS SDK is not on the executors' classpath",
                "NoClassDefFoundError: software/amazon/awssdk")


def write_from_jvm(writer: Any, aligned: DataFrame, table: Table,
                   storage: Mapping[str, str]) -> list[DataFile]:
    """Spark's tasks write the rows with Spark's own Parquet writer and upload each file to the
    table's data location on the object store (``io.metaservice.spark.ObjectStoreWriter``, the
    plugin's jar; no Hadoop filesystem, no committer): the data files they answered, described
    from the footers the tasks kept (no file is read back). The files go under a fresh
    directory of the write, which holds exactly the files answered, or nothing when the write
    fails (here or in the JVM).

    Raises:
        _SdkMissingOnExecutors: the executors lack the AWS SDK (nothing was written).
    """
    directory = f"{data_location(table).rstrip('/')}/ms-{uuid.uuid4().hex}/"
    settings = "\n".join(f"{k}\t{v}" for k, v in storage.items())
    try:
        answered = writer.write(aligned._jdf, directory, settings, _layout_lines(table))
    except Exception as error:  # noqa: BLE001 - Py4J's, or pyspark's conversion of a Spark error
        if any(marker in str(error) for marker in _SDK_MISSING):
            raise _SdkMissingOnExecutors(str(error).splitlines()[0][:300]) from error
        _raise_write_error(error, qualified_name(table))
    try:
        return data_files_from_footers(table, [
            (uri, int(size), base64.b64decode(footer))
            for uri, size, _rows, footer in (line.split("\t")
                                              for line in str(answered).splitlines())])
    except BaseException:
        try:
            writer.deleteWrite(directory, settings)
        except Exception as cleanup:  # noqa: BLE001 - the first failure is the one to raise
            logger.warning("object_store_write_cleanup_failed", extra={
                "table": qualified_name(table), "directory": directory, "error": str(cleanup)})
        raise


def _layout_lines(table: Table) -> str:
    """The table's properties that lay its files out (codec, row groups, pages, dictionaries,
    bloom filters, size: ``write.*`` and ``parquet.*``) as lines of ``key \t value``, for the
    plugin's JVM part."""
    return "\n".join(f"{k}\t{v}" for k, v in table.metadata.properties.items()
                     if k.startswith(("write.", "parquet.")) and "\n" not in k + v
                     and "\t" not in k)


def _raise_write_error(error: Exception, table: str) -> NoReturn:
    """The JVM write's failure as the plugin's error when the rows broke the table's schema
    (a null in a required column), as ``ValueError`` (pyiceberg's writer's error) when a
    table property of the files' layout is not a valid value, else as it came."""
    found = re.search(rf"null in required column '[^']*' of {re.escape(table)}", str(error))
    if found:
        raise UnsupportedSchemaError(found.group(0)) from error
    bad = re.search(r"table property \S+ must be [^\n]*", str(error))
    if bad:
        raise ValueError(f"{table}: {bad.group(0)}") from error
    raise error


def _require_plugin_on_workers(spark: SparkSession) -> None:
    """:func:`~spark_plugin._workers.require_plugin_on_workers` where this process has the
    session's JVM (a Spark Connect session's workers are the server's business)."""
    from spark_plugin._workers import require_plugin_on_workers

    if getattr(spark, "_jsparkSession", None) is not None:
        require_plugin_on_workers(spark)


def _write_task(handle: Any, batches: Iterator[Any]) -> Iterator[Any]:
    """One Spark task of :func:`write_from_tasks` (runs in a Python worker)."""
    import pickle

    import pyarrow as pa

    from spark_plugin._executor_tables import write_batches

    files, _rows = write_batches(handle, batches)
    if files:
        yield pa.RecordBatch.from_pydict({"data_file": [pickle.dumps(f) for f in files]})


def write_parquet(spark: SparkSession, aligned: DataFrame, table: Table) -> list[str]:
    """Spark's Parquet writer into a fresh directory under the table's data location (a
    filesystem, not an object store: see the module docstring); the paths of the files
    written, spelled as the table spells its location."""
    codec = table.metadata.properties.get("write.parquet.compression-codec", "zstd").strip().lower()
    if codec not in _SPARK_CODECS:  # as the plugin jar says (a session without one: Spark Connect)
        raise ValueError(f"{qualified_name(table)}: table property write.parquet.compression-codec"
                         " must be a Parquet codec (zstd, snappy, gzip, lz4, brotli,"
                         f" uncompressed...): {codec}")
    out = f"{data_location(table)}/ms-{uuid.uuid4().hex}"
    try:
        layout = parquet_layout_settings(spark, _layout_lines(table)) or {}
    except Exception as error:  # noqa: BLE001 - Py4J's; a bad property says which
        _raise_write_error(error, qualified_name(table))
    with scoped_spark_conf(spark, {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
                                   "spark.sql.parquet.fieldId.write.enabled": "true",
                                   **PROLEPTIC_WRITES}):
        (aligned.write.mode("errorifexists")
         .options(**layout)
         .option("compression", _SPARK_CODECS[codec])
         .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
         .parquet(out))
    return sorted(table_path(p, out) for p in _files_written(spark, aligned, out))


def _files_written(spark: SparkSession, aligned: DataFrame, out: str) -> list[str]:
    """The data files in ``out``: listed by Hadoop's filesystem in the driver's JVM (one
    listing, no query planned), else (a session without a JVM of its own) by a Spark read."""
    jvm_session = getattr(spark, "_jsparkSession", None)
    if jvm_session is None:
        try:
            return list(spark.read.schema(aligned.schema).parquet(out).inputFiles())
        except Exception:  # noqa: BLE001 - nothing was written (no rows, no partitions)
            return []
    jvm: Any = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(out)
    fs = path.getFileSystem(jvm_session.sessionState().newHadoopConf())
    if not fs.exists(path):
        return []
    return [str(status.getPath().toString()) for status in fs.listStatus(path)
            if status.isFile() and not status.getPath().getName().startswith(("_", "."))]


def is_object_store(location: str) -> bool:
    """Whether ``location`` is an object store's (``s3://``, ``s3a://``, ``s3n://``, ``gs://``,
    ``abfs://``...): not a filesystem's (a local path, ``file:``, ``hdfs:``)."""
    scheme = urlsplit(location).scheme
    return scheme not in ("", "file", "hdfs", "viewfs")


def table_path(path: str, like: str) -> str:
    """A path Spark answered, spelled as the table location ``like`` is: ``file:/x`` as
    ``file:///x`` when ``like`` is spelled so, and as the bare local path ``/x`` when ``like``
    is one. A bare path is how pyiceberg writes the files of a table whose location is one,
    and how it reads a path holding a table name's ``#`` or ``?`` whole (it reads a ``file:``
    path as a URL, whose fragment or query it drops)."""
    local = path.startswith("file:/") and not path.startswith("file://")
    if like.startswith("file:///") and local:
        return "file://" + path[len("file:"):]
    if not urlsplit(like).scheme and like.startswith("/") and local:
        return path[len("file:"):]
    return path


# -- reading ----------------------------------------------------------------------------------


def dataframe_from_plan(spark: SparkSession, table: Table, plan: ReadPlan) -> DataFrame:
    """The DataFrame of a read plan: exactly the planned files, columns of the plan's schema."""
    schema = plan.schema
    if not plan.file_paths:
        return spark.createDataFrame([], iceberg_schema_to_spark(schema))
    if plan.method == "native" and is_object_store(table.location()):
        return read_from_tasks(spark, table, plan)
    if plan.method == "native":
        if plan.by_field_id and spark.conf.get(FIELD_ID_READ_CONF, "false") != "true":
            spark.conf.set(FIELD_ID_READ_CONF, "true")
        spark_schema = iceberg_schema_to_spark(schema, with_ids=plan.by_field_id)
        return (spark.read.schema(spark_schema)
                .option("recursiveFileLookup", "true")
                .parquet(*plan.file_paths))
    data = read_arrow(table, plan)
    return spark.createDataFrame(data, schema=iceberg_schema_to_spark(schema))


def read_from_tasks(spark: SparkSession, table: Table, plan: ReadPlan) -> DataFrame:
    """The DataFrame of a plan whose files Spark's tasks read with pyiceberg's Arrow scan and
    the table's FileIO (``spark_plugin/_executor_tables.py``): the plan's files packed into
    partitions of about ``spark.sql.files.maxPartitionBytes``, one Spark task each."""
    from spark_plugin._executor_tables import TableHandle, pack_tasks

    _require_plugin_on_workers(spark)
    spark_schema = iceberg_schema_to_spark(plan.schema)
    groups = pack_tasks(list(scan_tasks(table, plan)), _max_partition_bytes(spark))
    read = functools.partial(_read_task, TableHandle.of(qualified_name(table), table),
                             plan.schema_json, spark_schema.json(), groups)
    return spark.range(0, len(groups), 1, len(groups)).mapInArrow(read, spark_schema)


def _max_partition_bytes(spark: SparkSession) -> int:
    """``spark.sql.files.maxPartitionBytes`` as Spark itself reads it (``128m``, ``1g``...);
    its default, 128 MiB, for a session without a JVM here (Spark Connect)."""
    session = getattr(spark, "_jsparkSession", None)
    if session is None:
        return 128 << 20
    return int(session.sessionState().conf().filesMaxPartitionBytes())


def _read_task(handle: Any, schema_json: str, spark_schema_json: str, groups: list[list[Any]],
               ids: Iterator[Any]) -> Iterator[Any]:
    """One Spark task of :func:`read_from_tasks` (runs in a Python worker): the groups whose
    numbers it was given."""
    from spark_plugin._executor_tables import arrow_schema_for_spark, read_tasks

    target = arrow_schema_for_spark(spark_schema_json)
    for batch in ids:
        for group in batch.column(0).to_pylist():
            yield from read_tasks(handle, schema_json, groups[group], target)
