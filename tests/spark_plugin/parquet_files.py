"""Parquet files of every column kind, the layouts a table's properties give them, and all a
reader learns from one: what the tests of the plugin's writers compare (its JVM writer of tables
on S3 and Spark's writer of tables on a filesystem, each against Spark's own
``df.write.parquet`` with the same settings)."""

from __future__ import annotations

import math
from typing import Any

FLAT = (("id", "long not null"), ("flag", "boolean"), ("small", "int"), ("big", "long"),
        ("ratio", "float"), ("amount", "double"), ("note", "string"), ("raw", "binary"),
        ("day", "date"), ("at", "timestamp"), ("local", "timestamp_ntz"),
        ("price", "decimal(9,2)"), ("total", "decimal(18,4)"))
"""Columns the JVM writer writes straight into parquet-mr's column writers."""
NESTED = (("id", "long not null"), ("huge", "decimal(30,5)"),
          ("point", "struct<x: double, y: double>"), ("tags", "array<string>"))
"""Columns it leaves to Spark's own writer (a wide decimal, a struct, a list)."""


def rows_of_every_kind(spark: Any, columns: tuple[tuple[str, str], ...]) -> Any:
    """3,000 rows of ``columns`` (``FLAT`` or ``NESTED``) with nulls, extremes and repeats, in
    one partition."""
    import datetime as dt
    from decimal import Decimal

    def value(kind: str, i: int) -> Any:
        if i % 7 == 3 and kind != "id":
            return None
        return {
            "id": i, "flag": i % 3 == 0, "small": (i % 50) - 25, "big": i * 1_000_003 - 2**40,
            "ratio": [float("nan"), -0.0, 1.5, float(i)][i % 4],
            "amount": [float("inf"), -1e300, 0.1 * i][i % 3],
            "note": ["", "é\u00e9\U0001f600", f"n{i}", "same"][i % 4],
            "raw": bytes([i % 256, 0, 255]), "day": dt.date(1000, 1, 1) + dt.timedelta(days=i * 97),
            "at": dt.datetime(1900, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i * 86_413.5),
            "local": dt.datetime(2024, 2, 29) + dt.timedelta(microseconds=i * 7_777_777),
            "price": Decimal(i % 1000) / 100 - 5, "total": Decimal(i) * Decimal("1.0001"),
            "huge": Decimal(10**24 + i) / 100_000 * (-1 if i % 2 else 1),
            "point": (i / 3, -float(i)), "tags": [f"t{i % 5}"] * (i % 3),
        }[kind]

    return spark.createDataFrame(
        [tuple(value(name, i) for name, _ in columns) for i in range(3000)],
        ", ".join(f"{name} {kind}" for name, kind in columns)).coalesce(1)


def bloom_filter_columns(data: bytes) -> list[str]:
    """The columns of a Parquet file that carry a bloom filter (pyarrow does not show them;
    DuckDB's ``parquet_metadata`` does)."""
    import tempfile

    import duckdb

    with tempfile.NamedTemporaryFile(suffix=".parquet") as file:
        file.write(data)
        file.flush()
        found = duckdb.sql(f"SELECT DISTINCT path_in_schema FROM parquet_metadata('{file.name}') "
                           "WHERE bloom_filter_offset IS NOT NULL ORDER BY 1").fetchall()
    return [row[0] for row in found]


def parquet_facts(data: bytes) -> dict[str, Any]:
    """All a reader learns from a Parquet file but where its bytes lie: the schema with field
    ids, the footer's key-values, every column chunk's layout, encodings and statistics, and
    the values (NaN spelled out, to compare equal)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def comparable(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: comparable(v) for k, v in value.items()}
        return "NaN" if isinstance(value, float) and math.isnan(value) else value

    parquet = pq.ParquetFile(pa.BufferReader(data))
    metadata = parquet.metadata
    chunks = [{k: comparable(v) for k, v in metadata.row_group(g).column(c).to_dict().items()
               if not k.endswith("_offset")}
              for g in range(metadata.num_row_groups) for c in range(metadata.num_columns)]
    return {"schema": str(parquet.schema).split("\n", 1)[1],  # (its first line: an address)
            "key_values": metadata.metadata, "created_by": metadata.created_by,
            "rows": metadata.num_rows, "row_groups": metadata.num_row_groups, "chunks": chunks,
            "codec": metadata.row_group(0).column(0).compression,
            "bloom_filters": bloom_filter_columns(data),
            "size": len(data),
            "values": {name: [comparable(v) for v in column]
                       for name, column in parquet.read().to_pydict().items()}}


ICEBERG_LAYOUT = {"write.parquet.row-group-size-bytes": 128 * 1024 * 1024,
                  "write.parquet.page-size-bytes": 1024 * 1024,
                  "write.parquet.page-row-limit": 20_000,
                  "write.parquet.dict-size-bytes": 2 * 1024 * 1024}
"""Iceberg's defaults for a table that sets none."""
SMALL_LAYOUT = {"write.parquet.row-group-size-bytes": 16 * 1024,
                "write.parquet.page-size-bytes": 4096, "write.parquet.page-row-limit": 500,
                "write.parquet.dict-size-bytes": 2048, "write.parquet.compression-level": 19,
                "write.parquet.row-group-check-min-record-count": 50,
                "write.parquet.row-group-check-max-record-count": 200,
                "write.parquet.bloom-filter-enabled.column.id": "true",
                "write.parquet.bloom-filter-fpp.column.id": 0.2}
"""Row groups, pages and dictionaries small enough for 3,000 rows to fill several of each,
their sizes checked more often, a bloom filter, and zstd's level 19 instead of 3."""
GZIP_LAYOUT = {"write.parquet.compression-codec": "gzip", "write.parquet.compression-level": 9}
"""gzip at a level as pyiceberg writes it (a number; Hadoop's zlib codec takes a name)."""
SPARK_OPTIONS = {"write.parquet.row-group-size-bytes": "parquet.block.size",
                 "write.parquet.page-size-bytes": "parquet.page.size",
                 "write.parquet.page-row-limit": "parquet.page.row.count.limit",
                 "write.parquet.dict-size-bytes": "parquet.dictionary.page.size",
                 "write.parquet.compression-level": "parquet.compression.codec.zstd.level",
                 "write.parquet.row-group-check-min-record-count":
                     "parquet.page.size.row.check.min",
                 "write.parquet.row-group-check-max-record-count":
                     "parquet.page.size.row.check.max",
                 "write.parquet.bloom-filter-enabled.column.id": "parquet.bloom.filter.enabled#id",
                 "write.parquet.bloom-filter-fpp.column.id": "parquet.bloom.filter.fpp#id"}
"""Spark's writer options (parquet-mr's settings) for the same layout."""


def spark_writer_options(layout: dict[str, Any] | None) -> dict[str, str]:
    """The options that make ``df.write.parquet`` lay a file out as a table with ``layout``."""
    layout = {**ICEBERG_LAYOUT, **(layout or {})}
    codec = str(layout.pop("write.parquet.compression-codec", "zstd"))
    options = {"compression": codec}
    if codec == "gzip":
        options["zlib.compress.level"] = "BEST_COMPRESSION" if layout.pop(
            "write.parquet.compression-level", None) == 9 else "DEFAULT_COMPRESSION"
    options.update({SPARK_OPTIONS[k]: str(v) for k, v in layout.items()})
    return options
