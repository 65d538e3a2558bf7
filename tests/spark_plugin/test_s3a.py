"""How the plugin hands S3 locations and a table's credentials to Hadoop's S3A (plain values; the
end-to-end runs on SeaweedFS are in test_on_s3.py)."""

from __future__ import annotations

from spark_plugin._s3a import (
    SIMPLE_PROVIDER,
    TEMPORARY_PROVIDER,
    hadoop_options,
    hadoop_path,
    table_path,
)

VENDED = {"s3.endpoint": "http://127.0.0.1:8333", "s3.region": "us-east-1",
          "s3.access-key-id": "ASIA1", "s3.secret-access-key": "s3cr3t",
          "s3.session-token": "t0ken", "s3.path-style-access": "true",
          "s3.session-token-expires-at-ms": "1", "token": "catalog-token"}


def test_s3_locations_are_opened_through_s3a_and_others_are_left_alone() -> None:
    assert hadoop_path("s3://lake/wh/db/t/data/x.parquet") == "s3a://lake/wh/db/t/data/x.parquet"
    assert hadoop_path("s3n://lake/k") == "s3a://lake/k"
    assert hadoop_path("s3a://lake/k") == "s3a://lake/k"
    assert hadoop_path("file:///tmp/wh/t") == "file:///tmp/wh/t"
    assert hadoop_path("/tmp/wh/t") == "/tmp/wh/t"


def test_paths_spark_answers_are_spelled_as_the_table_spells_its_location() -> None:
    assert table_path("s3a://lake/wh/t/data/p.parquet", "s3://lake/wh/t/data/ms-1") == \
        "s3://lake/wh/t/data/p.parquet"
    assert table_path("file:/tmp/wh/p.parquet", "file:///tmp/wh/ms-1") == \
        "file:///tmp/wh/p.parquet"
    assert table_path("file:/tmp/wh/p.parquet", "/tmp/wh/ms-1") == "/tmp/wh/p.parquet"
    assert table_path("file:/tmp/wh/t#1/p?.parquet", "/tmp/wh/t#1/ms-1") == \
        "/tmp/wh/t#1/p?.parquet"  # pyiceberg opens a bare path whole, a file: URL without '#1'


def test_vended_credentials_become_settings_of_the_tables_bucket_only() -> None:
    options = hadoop_options(VENDED, "s3://lake/wh/db/t/data/ms-1")
    assert options == {
        "fs.s3a.impl.disable.cache": "true",
        "fs.s3a.bucket.lake.endpoint": "http://127.0.0.1:8333",
        "fs.s3a.bucket.lake.endpoint.region": "us-east-1",
        "fs.s3a.bucket.lake.access.key": "ASIA1",
        "fs.s3a.bucket.lake.secret.key": "s3cr3t",
        "fs.s3a.bucket.lake.session.token": "t0ken",
        "fs.s3a.bucket.lake.path.style.access": "true",
        "fs.s3a.bucket.lake.connection.ssl.enabled": "false",
        "fs.s3a.bucket.lake.aws.credentials.provider": TEMPORARY_PROVIDER,
    }
    # the catalog's own token is no storage setting
    assert "catalog-token" not in options.values()


def test_each_bucket_read_gets_the_settings() -> None:
    options = hadoop_options(VENDED, "s3://lake/a.parquet", "s3://other/b.parquet",
                             "s3://lake/c.parquet")
    assert options["fs.s3a.bucket.lake.session.token"] == "t0ken"
    assert options["fs.s3a.bucket.other.session.token"] == "t0ken"
    assert len(options) == 1 + 2 * 8


def test_long_lived_keys_use_the_simple_provider_and_none_leave_s3a_its_own() -> None:
    keys = {"s3.access-key-id": "AK", "s3.secret-access-key": "SK",
            "s3.endpoint": "https://s3.example.com"}
    options = hadoop_options(keys, "s3://lake/t")
    assert options["fs.s3a.bucket.lake.aws.credentials.provider"] == SIMPLE_PROVIDER
    assert "fs.s3a.bucket.lake.session.token" not in options
    assert "fs.s3a.bucket.lake.connection.ssl.enabled" not in options
    assert hadoop_options({}, "s3://lake/t") == {"fs.s3a.impl.disable.cache": "true"}


def test_a_table_off_s3_needs_no_hadoop_setting() -> None:
    assert hadoop_options(VENDED, "file:///tmp/wh/t", "/tmp/wh/u") == {}


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
