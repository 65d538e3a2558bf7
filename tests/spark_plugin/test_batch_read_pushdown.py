"""Filters pushed into the ``metaservice`` batch format (``spark_plugin/streaming/pushdown.py``):
pyiceberg may skip files, row groups and rows, never one Spark's filter keeps.

The property runs the reader's planning and its executors' reads in process (no Spark: the
reader's methods are what Spark's Python workers call), over random conjunctions of Spark's
filter kinds on every column type, against a reference that evaluates them with SQL's
three-valued logic (and Spark's NaN ordering) over all the rows written."""

from __future__ import annotations

import datetime
import math
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.types import StringType
from pyspark.sql import datasource as f

from spark_plugin import _iceberg as ice
from spark_plugin._spark_io import iceberg_schema_to_spark
from spark_plugin.streaming.batch_read import PruningBatchReader, ResolvedVersion
from spark_plugin.streaming.options import BatchReadOptions, Connection
from spark_plugin.streaming.pushdown import row_filter
from spark_plugin.streaming.source import read_partition
from tests.conftest import examples

FILES = 6
ROWS_PER_FILE = 20
ROWS_PER_GROUP = 5
LETTERS = "abcdef"
DAY = datetime.date(2026, 1, 1)

SCHEMA = pa.schema([("id", pa.int64()), ("n", pa.int32()), ("s", pa.string()),
                    ("d", pa.date32()), ("b", pa.bool_()), ("x", pa.float64())])


HUGE = "\u00ff" * 2_500
"""A string past Parquet's statistics limit (4 KiB: its row group has no min or max), ordered
after every other suffix (its UTF-8 bytes are c3 bf, "é"'s c3 a9)."""


def _rows_of_file(k: int, rng: random.Random) -> list[dict[str, Any]]:
    """File ``k``'s rows: ids, numbers, dates and string prefixes in bands of their own (so
    bounds tell the files apart), a few nulls in every column but ``id``, NaN among ``x``, and
    strings past the statistics limit in a row group of their own (in every other file)."""
    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.1 else value

    def string(i: int) -> str:
        if k % 2 and i >= ROWS_PER_FILE - ROWS_PER_GROUP:
            return LETTERS[k] + HUGE
        return LETTERS[k] + rng.choice(["", "x", "xy", "b", "é"])

    return [{"id": 100 * k + i, "n": maybe(10 * k + rng.randrange(10)), "s": maybe(string(i)),
             "d": maybe(DAY + datetime.timedelta(days=10 * k + rng.randrange(10))),
             "b": maybe(rng.random() < 0.5),
             "x": maybe(rng.choice([float("nan"), -1.5, 0.0, 2.5 * k]))}
            for i in range(ROWS_PER_FILE)]


@pytest.fixture(scope="module")
def written(catalog) -> tuple[Any, list[dict[str, Any]]]:
    """A table of ``FILES`` data files (one append each) and all its rows."""
    database = "pushdown_" + random.Random().getrandbits(40).to_bytes(5, "big").hex()
    catalog.create_namespace(database)
    table = catalog.create_table(f"{database}.t", SCHEMA, properties={
        "write.parquet.row-group-limit": str(ROWS_PER_GROUP)})
    rng = random.Random(39)
    rows: list[dict[str, Any]] = []
    for k in range(FILES):
        batch = _rows_of_file(k, rng)
        table.append(pa.Table.from_pylist(batch, schema=SCHEMA))
        rows += batch
    return table, rows


def _reader(catalog, table, filters: list[f.Filter]) -> PruningBatchReader:
    """The reader Spark would plan for a read of ``table``'s current snapshot, given
    ``filters``."""
    name = "lake." + ".".join(table.name()[-2:])
    snapshot_id = table.current_snapshot().snapshot_id
    schema = ice.snapshot_schema(table.metadata, snapshot_id)
    version = ResolvedVersion(name, 1_000, snapshot_id, "strong", None, schema.model_dump_json())
    options = BatchReadOptions(Connection("http://127.0.0.1:9"), name, catalog=catalog)
    reader = PruningBatchReader(options, version, iceberg_schema_to_spark(schema).json())
    assert list(reader.pushFilters(filters)) == filters  # Spark evaluates every one again
    return reader


def _read(reader: PruningBatchReader) -> tuple[int, list[dict[str, Any]]]:
    """The files planned and the rows the executors hand to Spark."""
    partitions = reader.partitions()
    rows = [row for p in partitions for batch in read_partition(p) for row in batch.to_pylist()]
    return sum(len(p.tasks) for p in partitions), rows


# -- the reference: Spark's semantics ------------------------------------------------------------


def _key(value: Any) -> Any:
    """Spark orders NaN above every other double and holds NaN = NaN."""
    if isinstance(value, float):
        return (1, 0.0) if math.isnan(value) else (0, value)
    return value


def spark_eval(flt: f.Filter, row: dict[str, Any]) -> bool | None:
    """``flt`` on ``row`` as Spark evaluates it: True, False, or None (unknown: not kept)."""
    if isinstance(flt, f.Not):
        inner = spark_eval(flt.child, row)
        return None if inner is None else not inner
    v = row[flt.attribute[0]]
    if isinstance(flt, f.IsNull):
        return v is None
    if isinstance(flt, f.IsNotNull):
        return v is not None
    if isinstance(flt, f.EqualNullSafe):
        return (v is None and flt.value is None) or (
            v is not None and flt.value is not None and _key(v) == _key(flt.value))
    if v is None:
        return None
    if isinstance(flt, f.In):
        if any(w is not None and _key(v) == _key(w) for w in flt.value):
            return True
        return None if None in flt.value else False
    if isinstance(flt, f.StringStartsWith):
        return v.startswith(flt.value)
    if isinstance(flt, f.StringEndsWith):
        return v.endswith(flt.value)
    if isinstance(flt, f.StringContains):
        return flt.value in v
    a, b = _key(v), _key(flt.value)
    return {f.EqualTo: a == b, f.GreaterThan: a > b, f.GreaterThanOrEqual: a >= b,
            f.LessThan: a < b, f.LessThanOrEqual: a <= b}[type(flt)]


def kept(filters: list[f.Filter], rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(_key(v) if v is not None else (-1, "") for v in r.values())
                   for r in rows if all(spark_eval(x, r) is True for x in filters)),
                  key=repr)


# -- random filters -------------------------------------------------------------------------------

VALUES = {
    "id": st.integers(-10, 100 * FILES + 10),
    "n": st.integers(-5, 10 * FILES + 5),
    "s": st.sampled_from(["", "a", "ax", "b", "bz", "c", "cxy", "é", "f", "fb", "z",
                          "b" + HUGE, "b" + HUGE[:100], "d" + HUGE + "x"]),
    "d": st.dates(DAY - datetime.timedelta(days=5), DAY + datetime.timedelta(days=10 * FILES)),
    "b": st.booleans(),
    "x": st.sampled_from([float("nan"), -1.5, 0.0, 1.0, 5.0, 12.5]),
}


@st.composite
def a_filter(draw: st.DrawFn) -> f.Filter:
    column = draw(st.sampled_from(sorted(VALUES)))
    attribute, value = (column,), draw(VALUES[column])
    kinds: list[Any] = [f.EqualTo, f.EqualNullSafe, f.GreaterThan, f.GreaterThanOrEqual,
                        f.LessThan, f.LessThanOrEqual, "in", "in_null", f.IsNull, f.IsNotNull,
                        "not"]
    if column == "s":
        kinds += [f.StringStartsWith, f.StringEndsWith, f.StringContains]
    kind = draw(st.sampled_from(kinds))
    if kind == "not":
        return f.Not(draw(a_filter()))
    if kind in ("in", "in_null"):
        values = draw(st.lists(VALUES[column], min_size=1, max_size=4))
        return f.In(attribute, tuple(values) + ((None,) if kind == "in_null" else ()))
    if kind in (f.IsNull, f.IsNotNull):
        return kind(attribute)
    if kind is f.EqualNullSafe and draw(st.booleans()):
        value = None
    return kind(attribute, value)


@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(filters=st.lists(a_filter(), min_size=1, max_size=3))
def test_pushed_filters_never_lose_a_row_spark_would_keep(catalog, written, filters) -> None:
    table, rows = written
    files, read = _read(_reader(catalog, table, filters))
    assert kept(filters, read) == kept(filters, rows)
    assert files <= FILES and len(read) <= len(rows)


@pytest.mark.parametrize(("filters", "files", "exact"), [
    ([f.LessThan(("id",), 100)], 1, True),
    ([f.GreaterThanOrEqual(("id",), 400), f.IsNotNull(("s",))], 2, True),
    ([f.EqualTo(("d",), DAY + datetime.timedelta(days=21))], 1, True),
    ([f.In(("n",), (3, 55, None))], 2, True),
    ([f.EqualNullSafe(("id",), 7)], 1, True),
    # a string's comparisons prune no file (its bounds may leave out a row group), only rows
    ([f.StringStartsWith(("s",), "c")], FILES, True),
    ([f.GreaterThan(("s",), "bzz")], FILES, True),
    # not pushed: doubles, NOT, LIKE '%…'
    ([f.LessThan(("x",), -10.0)], FILES, False),
    ([f.Not(f.GreaterThanOrEqual(("id",), 120))], FILES, False),
    ([f.StringEndsWith(("s",), "xy")], FILES, False),
])
def test_pushed_filters_plan_only_the_files_they_may_need(catalog, written, filters, files,
                                                         exact) -> None:
    """The files planned; and the rows read: exactly those Spark keeps when every filter was
    pushed, else all."""
    table, rows = written
    planned, read = _read(_reader(catalog, table, filters))
    assert planned == files
    assert kept(filters, read) == kept(filters, rows)
    assert len(read) == (len(kept(filters, rows)) if exact else len(rows))


def test_a_string_in_a_row_group_without_statistics_is_read(catalog, written) -> None:
    """pyiceberg took the file's bounds of ``s`` from its other row groups: they end below
    ``b`` + HUGE, which a comparison must still find."""
    table, rows = written
    bounds = {t.file.file_path: t.file.upper_bounds.get(3) for t in table.scan().plan_files()}
    assert any(bound is not None and bound < ("b" + HUGE).encode() for bound in bounds.values())
    for filters in ([f.EqualTo(("s",), "b" + HUGE)], [f.GreaterThan(("s",), "bz")],
                    [f.StringStartsWith(("s",), "b" + HUGE[:3])],
                    [f.In(("s",), ("b" + HUGE, "q"))]):
        _, read = _read(_reader(catalog, table, filters))
        assert kept(filters, read) == kept(filters, rows) != []


@pytest.mark.parametrize("transform", ["year", "month", "day", "identity"])
def test_dates_at_the_ends_of_their_range_on_a_partitioned_table(catalog, transform) -> None:
    """pyiceberg cannot project DATE '9999-12-31' onto a year or month partition (it
    overflows): the read is planned without pruning, and right."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import parse_transform
    from pyiceberg.types import DateType, LongType, NestedField

    database = "pushdown_dates_" + random.Random().getrandbits(32).to_bytes(4, "big").hex()
    catalog.create_namespace(database)
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "d", DateType(), required=False))
    table = catalog.create_table(f"{database}.t", schema, partition_spec=PartitionSpec(
        PartitionField(2, 1000, parse_transform(transform), "d_part")))
    rows = [{"id": 1, "d": datetime.date(1, 1, 1)}, {"id": 2, "d": datetime.date(9999, 12, 31)},
            {"id": 3, "d": DAY}]
    paths: list[str] = []
    Path(table.location().removeprefix("file://"), "data").mkdir(parents=True, exist_ok=True)
    for row in rows:  # a file per partition, described by the plugin (no partitioned append
        # here: pyiceberg's needs pyiceberg-core for these transforms)
        paths.append(f"{table.location()}/data/{row['id']}.parquet")
        pq.write_table(pa.Table.from_pylist([row], schema=schema_to_pyarrow(schema)),
                       paths[-1].removeprefix("file://"))
    with table.transaction() as transaction, \
            transaction.update_snapshot().fast_append() as append:
        for data_file in ice.data_files_from_parquet(table, paths):
            append.append_data_file(data_file)
    table.refresh()
    for filters in ([f.LessThanOrEqual(("d",), datetime.date(9999, 12, 31))],
                    [f.GreaterThanOrEqual(("d",), datetime.date(1, 1, 1))],
                    [f.GreaterThan(("d",), datetime.date(9999, 12, 31))],
                    [f.LessThan(("d",), datetime.date(1, 1, 1))],
                    [f.EqualTo(("d",), datetime.date(9999, 12, 31))]):
        _, read = _read(_reader(catalog, table, filters))
        assert kept(filters, read) == kept(filters, rows)


def test_edge_values_and_columns_are_not_pushed_wrong(catalog) -> None:
    """Values past an int column's range (pyiceberg folds them into one that matches nothing),
    ``<=> NULL`` on a list column (pyiceberg cannot project it), and ``IS NULL`` on a column
    made required since the snapshot (pyiceberg binds it to false)."""
    from pyiceberg.types import IntegerType

    database = "pushdown_edges_" + random.Random().getrandbits(32).to_bytes(4, "big").hex()
    catalog.create_namespace(database)
    schema = pa.schema([("id", pa.int64()), ("n", pa.int32()), ("tags", pa.list_(pa.string())),
                        ("m", pa.int32())])
    table = catalog.create_table(f"{database}.t", schema)
    rows = [{"id": 1, "n": 2**31 - 1, "tags": None, "m": None},
            {"id": 2, "n": -2**31, "tags": ["a"], "m": 5}]
    table.append(pa.Table.from_pylist(rows, schema=schema))
    for filters in ([f.In(("n",), (2**40, 2**31 - 1))], [f.In(("n",), (-2**40, -2**31))],
                    [f.EqualTo(("n",), 2**40)], [f.GreaterThan(("n",), -2**40)]):
        _, read = _read(_reader(catalog, table, filters))
        assert kept(filters, read) == kept(filters, rows)
    _, read = _read(_reader(catalog, table, [f.EqualNullSafe(("tags",), None)]))
    assert len(read) == 2
    reader = _reader(catalog, table, [f.IsNull(("m",))])
    with table.update_schema(allow_incompatible_changes=True) as update:
        update.update_column("m", IntegerType(), required=True)
    _, read = _read(reader)
    assert [r["id"] for r in read if r["m"] is None] == [1]


@pytest.mark.parametrize("filters", [
    [f.EqualTo(("s", "inner"), "a")],  # a nested field
    [f.EqualTo(("nope",), 1)],  # no such column
    [f.EqualTo(("id",), "7")],  # values not of the column's type
    [f.EqualTo(("d",), datetime.datetime(2026, 1, 1))],
    [f.In(("n",), (1, "2"))],
])
def test_a_filter_pyiceberg_cannot_apply_as_spark_would_is_not_pushed(catalog, written,
                                                                     filters) -> None:
    table, rows = written
    planned, read = _read(_reader(catalog, table, filters))
    assert (planned, len(read)) == (FILES, len(rows))


def test_a_filter_on_a_column_renamed_since_the_snapshot_is_pushed_by_field_id(catalog) -> None:
    """The read's columns are its snapshot's; pyiceberg binds the table's current schema."""
    database = "pushdown_rename_" + random.Random().getrandbits(32).to_bytes(4, "big").hex()
    catalog.create_namespace(database)
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    table = catalog.create_table(f"{database}.t", schema)
    for k in range(3):
        table.append(pa.Table.from_pylist([{"id": 10 * k + i, "name": f"{'abc'[k]}{i}"}
                                           for i in range(5)], schema=schema))
    reader = _reader(catalog, table, [f.StringStartsWith(("name",), "b"),
                                      f.GreaterThan(("id",), 11)])
    with table.update_schema() as update:
        update.rename_column("name", "label")
    with table.update_schema() as update:
        update.add_column("name", StringType())
    table.refresh()
    files, read = _read(reader)
    assert files == 2  # id > 11 rules out the first file (a string's comparison prunes none)
    assert sorted(r["id"] for r in read if r["name"].startswith("b") and r["id"] > 11) == \
        [12, 13, 14]
    assert {r["name"][0] for r in read} == {"b"}

    current = table.schema()
    snapshot = ice.snapshot_schema(table.metadata, table.current_snapshot().snapshot_id)
    # the snapshot's "name" is the column now called "label"
    assert row_filter([f.EqualTo(("name",), "b1")], snapshot, current).pushed
