"""Spark's filters on a ``metaservice`` batch read, as a pyiceberg row filter.

Spark hands a Python data source the conjuncts of a query's ``WHERE`` that it can express
(``pyspark.sql.datasource.Filter``; pyspark 4.1+, with ``spark.sql.python.filterPushdown.enabled``).
The batch reader gives pyiceberg those it can apply without changing a result:

* planning skips the data files (and manifests) whose partition values and column bounds rule
  them out (not by a string column's comparisons: see :func:`row_filter`; a filter it cannot
  plan with is left out of planning), and
* the Arrow scan skips row groups by their statistics and drops the rows that fail.

Spark still evaluates every filter after the scan, so pushing is only ever a saving: a filter is
pushed when pyiceberg keeps every row Spark would, and only then. That holds for comparisons,
``IN``, ``IS [NOT] NULL`` and ``LIKE 'abc%'`` on top-level columns of types whose order and
equality are the same on both sides (boolean, int, long, string, date), with a value of the
column's type and range. Not pushed: floating point (NaN orders differently), timestamps (a
session time zone applies), decimals, nested fields, ``NOT`` and ``<>`` (they rule out no file by
its bounds), ``LIKE '%abc'`` and ``LIKE '%abc%'`` (pyiceberg has no such predicate), and anything
pyiceberg cannot bind.

Columns are referred to by the read's snapshot schema and resolved by field id to the table's
current schema, which pyiceberg binds against: a column renamed since the snapshot is still the
same column; one dropped since, or whose type or nullability changed, is not pushed.

**Only on a Spark that keeps a pushdown with its scan.** Spark 4.1.1 and 4.2.0 store the
reader a pushdown made (its partitions and read function) on the data source of the DataFrame,
shared by every query of that DataFrame, and a later query whose filters Spark does not push
reads with it: ``df.filter("id > 10").count()`` then ``df.count()`` would count the first
query's rows. Spark's main branch keeps it with the scan (``PythonScanBuilder.readInfo``).
:func:`spark_plugin.register_data_source` asks the session's Spark
(:func:`pushdown_is_scoped_to_its_scan`). On one that shares it, the format's reader takes no
filters (it has no ``pushFilters``), so what Spark shares holds none and is harmless, whatever
the setting. On one that scopes it, the setting is turned on (for every Python data source of
the session: one without ``pushFilters`` is not affected) unless the session turned it off,
and the reader is :class:`~spark_plugin.streaming.batch_read.PruningBatchReader` (which pyspark
then requires the setting for: turned off afterwards, reads fail saying so).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema
    from pyspark.sql.datasource import Filter

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_SCAN_BUILDER = "org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder"


def pushdown_is_scoped_to_its_scan(spark: Any) -> bool:
    """Whether ``spark``'s JVM keeps a Python data source's pushed reader with the one scan it
    was made for (its ``PythonScanBuilder`` holds a ``readInfo``). False when it cannot be told
    (Spark Connect: no JVM here), as on Spark 4.1.1 and 4.2.0."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    try:
        fields = jvm.java.lang.Class.forName(_SCAN_BUILDER).getDeclaredFields()
        return any(str(f.getName()) == "readInfo" for f in fields)
    except Exception:  # noqa: BLE001 - any failure to tell means: not known to be scoped
        return False


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -2**31 <= value < 2**31


def _is_long(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63


def _is_date(value: Any) -> bool:
    return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)


_VALUES_OF_TYPE = {
    "BooleanType": lambda v: isinstance(v, bool), "IntegerType": _is_int, "LongType": _is_long,
    "StringType": lambda v: isinstance(v, str), "DateType": _is_date,
}
"""pyiceberg's types of the columns filters are pushed on, by class name, and what a value of
each is in Python (as Spark hands it, within the type's range): values Spark and pyiceberg
compare alike."""


def _value_fits(iceberg_type: Any, value: Any) -> bool:
    fits = _VALUES_OF_TYPE.get(type(iceberg_type).__name__)
    return fits is not None and fits(value)


def _reference(attribute: tuple[str, ...], snapshot: Schema, current: Schema) -> tuple[str, Any]:
    """The current schema's name and the type of the top-level column ``attribute`` names in
    the snapshot's schema; ``("", None)`` when there is none, it is nested, or its type or
    nullability changed (pyiceberg binds ``IS NULL`` on a required column to false)."""
    if len(attribute) != 1:
        return "", None
    try:
        field = snapshot.find_field(attribute[0], case_sensitive=True)
        now = current.find_field(field.field_id)
    except ValueError:
        return "", None
    if now.field_type != field.field_type or now.required != field.required:
        return "", None
    return now.name, now.field_type


def _predicate(kind: str, name: str, *values: Any) -> BooleanExpression:
    """pyiceberg's predicate ``kind`` (a class of ``pyiceberg.expressions``) on column
    ``name``. (Its classes are pydantic models, whose constructors mypy reads as keyword-only,
    while they take the column and value positionally.)"""
    from pyiceberg import expressions

    predicate: BooleanExpression = getattr(expressions, kind)(name, *values)
    return predicate


def _translate(f: Filter, snapshot: Schema,
               current: Schema) -> tuple[BooleanExpression, bool] | None:
    """``f`` as pyiceberg's predicate, and whether planning may use it (see :func:`row_filter`);
    ``None`` when it is not pushed."""
    from pyspark.sql import datasource as spark

    attribute = getattr(f, "attribute", None)  # NOT has none, only a child
    if attribute is None:
        return None
    name, iceberg_type = _reference(attribute, snapshot, current)
    kind = type(iceberg_type).__name__
    if kind not in _VALUES_OF_TYPE:
        return None
    value: Any = getattr(f, "value", None)
    if isinstance(f, (spark.IsNull, spark.IsNotNull)):
        return _predicate("IsNull" if isinstance(f, spark.IsNull) else "NotNull", name), True
    plannable = kind != "StringType"
    if isinstance(f, spark.EqualNullSafe) and value is None:
        return _predicate("IsNull", name), True
    if isinstance(f, spark.In):
        values = [v for v in value if v is not None]
        if not values or not all(_value_fits(iceberg_type, v) for v in values):
            return None
        return _predicate("In", name, values), plannable
    if not _value_fits(iceberg_type, value):
        return None
    if isinstance(f, spark.StringStartsWith):
        return _predicate("StartsWith", name, value), plannable
    comparison = _COMPARISONS.get(type(f).__name__)
    return None if comparison is None else (_predicate(comparison, name, value), plannable)


_COMPARISONS = {
    "EqualTo": "EqualTo", "EqualNullSafe": "EqualTo", "GreaterThan": "GreaterThan",
    "GreaterThanOrEqual": "GreaterThanOrEqual", "LessThan": "LessThan",
    "LessThanOrEqual": "LessThanOrEqual",
}
"""Spark's comparison filters by class name, pyiceberg's predicate of the same meaning."""


@dataclass(frozen=True)
class RowFilter:
    """What a read's pushed filters become: ``planning`` rules data files out by their
    partition values and column bounds, ``scan`` row groups by their statistics and then
    rows; ``pushed``: the filters they hold."""

    planning: BooleanExpression
    scan: BooleanExpression
    pushed: tuple[Filter, ...]


def row_filter(filters: Sequence[Filter], snapshot: Schema, current: Schema) -> RowFilter:
    """The conjunction of the ``filters`` pyiceberg can apply exactly as Spark would (see the
    module docstring), bound-checked against ``current``.

    A string column's comparisons stay out of planning: a Parquet writer leaves out the
    statistics of a row group whose strings run over 4 KiB, and pyiceberg (0.12) then takes a
    file's bounds from its other row groups alone (a file of "a" and "m" * 5000 is said to end
    at "a"), so a file's string bounds may rule out rows it holds. The scan judges each row
    group by its own statistics and reads one that has none.
    """
    from pyiceberg.expressions import AlwaysTrue, And
    from pyiceberg.expressions.visitors import bind

    planning: BooleanExpression = AlwaysTrue()
    scan: BooleanExpression = AlwaysTrue()
    pushed: list[Filter] = []
    for f in filters:
        translated = _translate(f, snapshot, current)
        if translated is None:
            continue
        predicate, plannable = translated
        try:
            bind(current, predicate, case_sensitive=True)
        except (TypeError, ValueError):
            continue
        scan = predicate if not pushed else And(scan, predicate)
        pushed.append(f)
        if plannable:
            planning = predicate if isinstance(planning, AlwaysTrue) else And(planning, predicate)
    return RowFilter(planning, scan, tuple(pushed))
