"""Spark's writer and reader on real Iceberg tables: field ids, timestamp rules, required
columns, partitioned tables, and reads that stay correct after schema evolution."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow.parquet as pq
import pytest

import spark_plugin as sp
from spark_plugin import _iceberg as ice
from spark_plugin import _spark_io as sio
from tests.spark_plugin.parquet_files import (
    FLAT,
    GZIP_LAYOUT,
    SMALL_LAYOUT,
    parquet_facts,
    rows_of_every_kind,
    spark_writer_options,
)

pytestmark = pytest.mark.spark

ROWS = [
    (1, "a", dt.datetime(2024, 1, 1, 12, 30), dt.datetime(2024, 1, 1, 12, 30), Decimal("1.50")),
    (2, "b", None, dt.datetime(2024, 1, 2), Decimal("2.25")),
    (3, None, dt.datetime(2024, 1, 3), None, None),
]
DDL = ("id long not null, name string, local_ts timestamp_ntz, utc_ts timestamp, "
       "amount decimal(10,2)")


def rows_of(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


@pytest.fixture
def source_df(spark):
    return spark.createDataFrame(ROWS, DDL)


def commit(table, spark, df, barrier: int, overwrite: bool = False):
    files = sio.write_data_files(spark, df, table)
    return ice.commit_sink(table, job="test", barrier=barrier, data_files=files,
                           overwrite=overwrite)


def test_schema_mapping_from_spark(spark, catalog, database, source_df) -> None:
    table = sp.create_table_from_spark_schema(f"lake.{database}.t", source_df, catalog=catalog)
    fields = {f.name: (str(f.field_type), f.required) for f in table.schema().fields}
    assert fields == {"id": ("long", True), "name": ("string", False),
                      "local_ts": ("timestamp", False), "utc_ts": ("timestamptz", False),
                      "amount": ("decimal(10, 2)", False)}
    again = sp.create_table_from_spark_schema(f"lake.{database}.t", source_df.schema,
                                              catalog=catalog, exist_ok=True)
    assert again.metadata.table_uuid == table.metadata.table_uuid


def test_native_write_carries_field_ids_and_micros(spark, catalog, database, source_df) -> None:
    table = sp.create_table_from_spark_schema(f"lake.{database}.t", source_df, catalog=catalog)
    files = sio.write_data_files(spark, source_df, table)
    assert files and all(f.file_path.startswith(table.location()) for f in files)
    for f in files:
        meta = pq.read_metadata(f.file_path.removeprefix("file://"))
        arrow_schema = meta.schema.to_arrow_schema()
        ids = {field.name: int(field.metadata[b"PARQUET:field_id"]) for field in arrow_schema}
        assert ids == {f2.name: f2.field_id for f2 in table.schema().fields}
        physical = {meta.schema.column(i).name: meta.schema.column(i).physical_type
                    for i in range(meta.num_columns)}
        assert physical["local_ts"] == physical["utc_ts"] == "INT64"  # never INT96
        assert str(arrow_schema.field("local_ts").type) == "timestamp[us]"
        assert str(arrow_schema.field("utc_ts").type) == "timestamp[us, tz=UTC]"
        assert not arrow_schema.field("id").nullable


def test_native_read_equals_pyiceberg_read(spark, catalog, database, source_df) -> None:
    table = sp.create_table_from_spark_schema(f"lake.{database}.t", source_df, catalog=catalog)
    done = commit(table, spark, source_df, 1)
    plan = ice.plan_snapshot_read(table, done.snapshot_id)
    assert plan.method == "native"
    native = sio.dataframe_from_plan(spark, table, plan)
    arrow = sio.dataframe_from_plan(spark, table,
                                    ice.plan_snapshot_read(table, done.snapshot_id,
                                                           allow_native=False))
    assert native.schema.simpleString() == arrow.schema.simpleString()
    assert rows_of(native) == rows_of(arrow) == rows_of(source_df)
    assert table.scan(snapshot_id=done.snapshot_id).to_arrow().num_rows == 3


def test_a_null_in_a_required_column_fails_the_write(spark, catalog, database, source_df) -> None:
    table = sp.create_table_from_spark_schema(f"lake.{database}.t", source_df, catalog=catalog)
    bad = spark.createDataFrame([(None, "x")], "id long, name string")
    with pytest.raises(Exception, match="null in required column 'id'"):
        sio.write_data_files(spark, bad, table)


def test_unknown_columns_are_refused_and_missing_optional_ones_are_null(
        spark, catalog, database, source_df) -> None:
    table = sp.create_table_from_spark_schema(f"lake.{database}.t", source_df, catalog=catalog)
    with pytest.raises(sp.UnsupportedSchemaError, match="not in table"):
        sio.write_data_files(spark, spark.createDataFrame([(1, 2)], "id long, surprise int"),
                             table)
    done = commit(table, spark, spark.createDataFrame([(7,)], "id int"), 1)
    df = sio.dataframe_from_plan(spark, table, ice.plan_snapshot_read(table, done.snapshot_id))
    assert rows_of(df) == [(7, None, None, None, None)]


def test_partitioned_table_is_written_by_pyiceberg_in_the_tasks_and_read_back(
        spark, catalog, database, source_df) -> None:
    table = sp.create_table_from_spark_schema(f"lake.{database}.p", source_df, catalog=catalog,
                                              partition_by=["name"])
    assert sio.executor_write_reason(table) == "partitioned table"
    done = commit(table, spark, source_df, 1)
    table.refresh()
    assert len(list(table.scan().plan_files())) == 3  # one file per partition value
    plan = ice.plan_snapshot_read(table, done.snapshot_id)
    assert rows_of(sio.dataframe_from_plan(spark, table, plan)) == rows_of(source_df)


def test_a_renamed_column_reads_correct_values(spark, catalog, database, source_df) -> None:
    table = sp.create_table_from_spark_schema(f"lake.{database}.t", source_df, catalog=catalog)
    commit(table, spark, source_df, 1)
    with table.update_schema() as update:
        update.rename_column("name", "label")
    table.refresh()
    newer = spark.createDataFrame([(4, "d")], "id long, label string")
    done = commit(table, spark, newer, 2)
    plan = ice.plan_snapshot_read(table, done.snapshot_id)
    assert (plan.method, plan.by_field_id) == ("native", True)
    df = sio.dataframe_from_plan(spark, table, plan)
    assert df.columns == ["id", "label", "local_ts", "utc_ts", "amount"]
    labels = sorted((r.id, r.label) for r in df.select("id", "label").collect())
    assert labels == [(1, "a"), (2, "b"), (3, None), (4, "d")]
    arrow_df = sio.dataframe_from_plan(
        spark, table, ice.plan_snapshot_read(table, done.snapshot_id, allow_native=False))
    assert rows_of(arrow_df) == rows_of(df)


def test_a_dropped_and_re_added_column_is_not_confused(spark, catalog, database, source_df) -> None:
    """Reading by name would return the dropped column's old values under the new column."""
    table = sp.create_table_from_spark_schema(f"lake.{database}.t", source_df, catalog=catalog)
    commit(table, spark, source_df, 1)
    with table.update_schema() as update:
        update.delete_column("name")
    with table.update_schema() as update:
        update.add_column("name", sp_string())
    table.refresh()
    done = commit(table, spark, spark.createDataFrame([(9, "new")], "id long, name string"), 2)
    df = sio.dataframe_from_plan(spark, table, ice.plan_snapshot_read(table, done.snapshot_id))
    assert sorted((r.id, r.name) for r in df.select("id", "name").collect()) == [
        (1, None), (2, None), (3, None), (9, "new")]


def sp_string():
    from pyiceberg.types import StringType

    return StringType()


def test_changes_between_snapshots(spark, catalog, database, source_df) -> None:
    table = sp.create_table_from_spark_schema(f"lake.{database}.t", source_df, catalog=catalog)
    first = commit(table, spark, source_df.where("id = 1"), 1)
    commit(table, spark, source_df.where("id = 2"), 2)
    third = commit(table, spark, source_df.where("id = 3"), 3)
    plan = ice.plan_appended_read(table, first.snapshot_id, third.snapshot_id)
    assert sorted(r.id for r in sio.dataframe_from_plan(spark, table, plan).collect()) == [2, 3]
    empty = ice.plan_appended_read(table, third.snapshot_id, third.snapshot_id)
    df = sio.dataframe_from_plan(spark, table, empty)
    assert df.count() == 0 and df.columns == ["id", "name", "local_ts", "utc_ts", "amount"]


def test_tasks_write_the_same_instants_whatever_the_sessions_time_zone(
        spark, catalog, database) -> None:
    """Spark hands a task's ``timestamp`` columns to Python labelled with the session's time
    zone; the table holds the same instants (and ``timestamp_ntz`` the same wall-clock values)
    as a session in UTC writes."""
    from pyspark.sql import functions as F

    rows = [(1, dt.datetime(2024, 3, 10, 7, 30), dt.datetime(2024, 3, 10, 7, 30))]
    frame = spark.createDataFrame(rows, "id long, local_ts timestamp_ntz, utc_ts timestamp")
    table = sp.create_table_from_spark_schema(f"lake.{database}.p", frame, catalog=catalog,
                                              partition_by=["id"])
    assert sio.executor_write_reason(table) == "partitioned table"
    with sio.scoped_spark_conf(spark, {"spark.sql.session.timeZone": "America/New_York"}):
        commit(table, spark, frame, 1)
    table.refresh()
    [row] = table.scan().to_arrow().to_pylist()
    instant = frame.select(F.unix_micros("utc_ts")).first()[0]
    assert row["utc_ts"] == dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + \
        dt.timedelta(microseconds=instant)
    assert row["local_ts"] == dt.datetime(2024, 3, 10, 7, 30)


@pytest.mark.parametrize("mode", ["LEGACY", "EXCEPTION"])
def test_ancient_dates_are_written_proleptic_whatever_the_session_s_rebase_mode(
        spark, catalog, database, mode) -> None:
    """Spark's own Parquet writer (a table on a filesystem) writes Iceberg's proleptic dates
    and timestamps as they are, where the session would rebase (LEGACY) or refuse (EXCEPTION)
    them."""
    day, at = dt.date(1000, 1, 1), dt.datetime(1200, 3, 1, 12, tzinfo=dt.UTC)
    frame = spark.createDataFrame([(1, day, at)], "id long, day date, at timestamp")
    table = sp.create_table_from_spark_schema(f"lake.{database}.t", frame, catalog=catalog)
    assert sio.executor_write_reason(table) is None  # Spark's writer, not pyiceberg's
    with sio.scoped_spark_conf(spark, {"spark.sql.parquet.datetimeRebaseModeInWrite": mode,
                                       "spark.sql.parquet.int96RebaseModeInWrite": mode}):
        commit(table, spark, frame, 1)
    table.refresh()
    [row] = table.scan().to_arrow().to_pylist()
    assert (row["day"], row["at"]) == (day, at)


@pytest.mark.parametrize("layout", [None, SMALL_LAYOUT, GZIP_LAYOUT],
                         ids=["defaults", "small", "gzip"])
def test_a_filesystem_table_s_files_are_laid_out_as_its_properties_say(
        spark, catalog, database, layout, tmp_path) -> None:
    """Spark's writer of tables on a filesystem lays files out as the table's properties say
    (the JVM part's ``ParquetLayout``, as for tables on S3), with Iceberg's defaults (a 2 MiB
    dictionary, where Spark's is 1 MiB): the file is the one Spark's ``df.write.parquet``
    writes of the same rows given the same settings by hand."""
    rows = rows_of_every_kind(spark, FLAT)
    table = sp.create_table_from_spark_schema(
        f"lake.{database}.t", rows, catalog=catalog,
        properties={k: str(v) for k, v in (layout or {}).items()})
    [written] = sio.write_data_files(spark, rows, table)
    with table.io.new_input(written.file_path).open() as stream:
        ours = parquet_facts(stream.read())
    aligned = sio.align_to_schema(rows, table.schema(), table=table.name()[-1])
    with sio.scoped_spark_conf(spark, {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
                                       "spark.sql.parquet.fieldId.write.enabled": "true"}):
        aligned.write.options(**spark_writer_options(layout)).parquet(str(tmp_path / "spark"))
    [local] = (tmp_path / "spark").glob("*.parquet")
    assert ours == parquet_facts(local.read_bytes())
    assert (ours["row_groups"] > 1) == (layout is SMALL_LAYOUT), ours["row_groups"]
    assert (ours["codec"], ours["bloom_filters"]) == (
        "GZIP" if layout is GZIP_LAYOUT else "ZSTD", ["id"] if layout is SMALL_LAYOUT else [])


@pytest.mark.parametrize(("key", "value"), [("write.parquet.page-size-bytes", "abc"),
                                            ("write.parquet.compression-codec", "bogus"),
                                            ("write.parquet.compression-level", "abc"),
                                            ("write.parquet.compression-level", "23")])
def test_a_bad_layout_property_of_a_filesystem_table_is_a_clear_error(
        spark, catalog, database, source_df, key, value) -> None:
    table = sp.create_table_from_spark_schema(f"lake.{database}.t", source_df, catalog=catalog,
                                              properties={key: value})
    with pytest.raises(ValueError, match=f"table property {key} must be .*: {value}"):
        sio.write_data_files(spark, source_df, table)


def test_an_unknown_codec_is_a_clear_error_also_for_a_session_without_the_plugin_jar(
        catalog, database, source_df) -> None:
    """A session with no JVM of its own (Spark Connect) has no plugin jar to check the table's
    properties: its writes were zstd, silently."""
    table = sp.create_table_from_spark_schema(
        f"lake.{database}.t", source_df, catalog=catalog,
        properties={"write.parquet.compression-codec": "Bogus"})
    without_jvm = object()  # no _sc, no _jsparkSession: nothing is asked of it
    with pytest.raises(ValueError, match="compression-codec must be a Parquet codec .*: bogus"):
        sio.write_parquet(without_jvm, source_df, table)  # type: ignore[arg-type]


def test_a_column_with_values_past_the_statistics_limit_gets_no_bounds(
        spark, catalog, database) -> None:
    """Parquet writers keep no min or max for a row group holding a value over 4 KiB, and
    pyiceberg took the file's bounds from the other row groups: the file was said to end below
    its own long strings, so any engine pruning by bounds lost them. Such a column gets no
    bounds; the others keep theirs."""
    from pyiceberg.expressions import EqualTo, GreaterThan

    huge = "\u00ff" * 2_500
    rows = spark.createDataFrame([(i, f"a{i:05d}" if i < 1_000 else huge) for i in range(1_005)],
                                 "id long, s string").coalesce(1)
    table = sp.create_table_from_spark_schema(f"lake.{database}.t", rows, catalog=catalog,
                                              properties={
        "write.parquet.row-group-size-bytes": "4096", "parquet.enable.dictionary": "false",
        "write.parquet.row-group-check-min-record-count": "10",
        "write.parquet.row-group-check-max-record-count": "10"})
    [written] = sio.write_data_files(spark, rows, table)
    footer = pq.read_metadata(written.file_path.removeprefix("file://"))
    groups = [footer.row_group(g).column(1).statistics for g in range(footer.num_row_groups)]
    assert any(s.has_min_max for s in groups) and not all(s.has_min_max for s in groups)
    assert 2 not in written.lower_bounds and 2 not in written.upper_bounds
    assert written.upper_bounds[1] and written.lower_bounds[1]
    ice.commit_sink(table, job="test", barrier=1, data_files=[written])
    assert table.refresh().scan(row_filter=EqualTo("s", huge)).to_arrow().num_rows == 5
    assert table.scan(row_filter=GreaterThan("s", "b")).to_arrow().num_rows == 5


def test_a_brotli_table_on_a_filesystem_is_written_by_pyiceberg(spark, catalog, database,
                                                                source_df) -> None:
    """Spark's jars have no Brotli codec (parquet-mr's needs a native library): the table's
    files are written by pyiceberg's writer in the tasks, in Brotli, not refused by Spark."""
    table = sp.create_table_from_spark_schema(
        f"lake.{database}.t", source_df, catalog=catalog,
        properties={"write.parquet.compression-codec": "brotli"})
    assert sio.executor_write_reason(table) == "codec brotli"
    commit(table, spark, source_df, 1)
    files = [t.file.file_path for t in table.refresh().scan().plan_files()]
    assert files and all(
        pq.read_metadata(f.removeprefix("file://")).row_group(0).column(0).compression
        == "BROTLI" for f in files)
    assert sorted(r["id"] for r in table.scan().to_arrow().to_pylist()) == [1, 2, 3]
