"""Where the plugin's Spark writes and reads a table's files itself (a filesystem) and where
its tasks do through pyiceberg's FileIO (an object store), and how paths Spark answers are
spelled (plain values; the end-to-end runs on SeaweedFS are in test_on_s3.py)."""

from __future__ import annotations

from spark_plugin._spark_io import is_object_store, table_path


def test_object_stores_are_told_from_filesystems() -> None:
    for location in ("s3://lake/wh/t", "s3a://lake/k", "s3n://lake/k", "gs://b/t"):
        assert is_object_store(location), location
    for location in ("/tmp/wh/t", "file:///tmp/wh/t", "file:/tmp/wh/t", "hdfs://nn/wh/t"):
        assert not is_object_store(location), location


def test_paths_spark_answers_are_spelled_as_the_table_spells_its_location() -> None:
    assert table_path("file:/tmp/wh/p.parquet", "file:///tmp/wh/ms-1") == \
        "file:///tmp/wh/p.parquet"
    assert table_path("file:/tmp/wh/p.parquet", "/tmp/wh/ms-1") == "/tmp/wh/p.parquet"
    assert table_path("file:/tmp/wh/t#1/p?.parquet", "/tmp/wh/t#1/ms-1") == \
        "/tmp/wh/t#1/p?.parquet"  # pyiceberg opens a bare path whole, a file: URL without '#1'
    assert table_path("hdfs://nn/wh/p.parquet", "hdfs://nn/wh/ms-1") == "hdfs://nn/wh/p.parquet"


class _HeldTable:
    """What :func:`with_fresh_credentials` looks at: the FileIO's properties, and ``refresh``."""

    def __init__(self, properties: dict[str, str]) -> None:
        self.io = type("FileIO", (), {"properties": properties})()
        self.refreshes = 0

    def refresh(self) -> _HeldTable:
        self.refreshes += 1
        return self


def test_only_vended_credentials_about_to_end_load_a_held_table_again() -> None:
    from spark_plugin._iceberg import with_fresh_credentials
    from spark_plugin._iceberg.catalogs import CREDENTIALS_RENEWAL_MARGIN_S as MARGIN

    ends_ms = 2_000_000_000_000
    for properties, now, refreshes in [
        ({"s3.session-token-expires-at-ms": str(ends_ms)}, ends_ms / 1000 - MARGIN - 1, 0),
        ({"s3.session-token-expires-at-ms": str(ends_ms)}, ends_ms / 1000 - MARGIN + 1, 1),
        ({"s3.session-token-expires-at-ms": str(ends_ms)}, ends_ms / 1000 + 1, 1),  # ended
        ({"s3.access-key-id": "AKIA1"}, ends_ms / 1000, 0),  # long-lived keys: never
        ({"s3.session-token-expires-at-ms": "soon"}, ends_ms / 1000, 0),  # not a time
        ({}, ends_ms / 1000, 0),  # a table off S3
    ]:
        table = _HeldTable(properties)
        assert with_fresh_credentials(table, now=now) is table  # type: ignore[arg-type]
        assert table.refreshes == refreshes, (properties, now)
