"""Where the plugin's jars are, and which object-store writes its JVM writer takes."""

from __future__ import annotations

from pathlib import Path

import pytest

import spark_plugin as sp
from spark_plugin._jvm import PLUGIN_JAR, plugin_jar
from spark_plugin._spark_io import _jvm_can_write

VENDED = {"s3.endpoint": "http://127.0.0.1:8333", "s3.access-key-id": "k",
          "s3.secret-access-key": "s", "s3.session-token": "t"}


def test_the_plugin_jars_are_the_plugin_s_and_the_aws_bundle_beside_it() -> None:
    jars = [Path(p) for p in sp.plugin_jars().split(",")]
    assert [j.name for j in jars][0] == PLUGIN_JAR
    assert len(jars) == 2 and jars[1].name.startswith("iceberg-aws-bundle-")
    assert all(j.is_file() and j.parent == jars[0].parent for j in jars)


def test_a_jar_named_by_the_environment_must_be_there(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setenv("METASERVICE_PLUGIN_JAR", str(tmp_path / "nowhere.jar"))
    with pytest.raises(FileNotFoundError, match="engines/plugin-jvm/install.sh"):
        plugin_jar()
    (tmp_path / "nowhere.jar").write_bytes(b"PK")
    assert sp.plugin_jars() == str(tmp_path / "nowhere.jar")  # no bundle beside it


@pytest.mark.parametrize(("location", "storage", "jvm"), [
    ("s3://lake/wh/db/t/data", VENDED, True),
    ("s3a://lake/wh/db/t/data", VENDED, True),
    ("gs://lake/wh/db/t/data", VENDED, False),  # not S3
    ("s3://lake/wh/db/t/data", {**VENDED, "s3.remote-signing-enabled": "true"}, False),
    ("s3://lake/wh/db/t/data", {"s3.endpoint": "http://127.0.0.1:8333"}, False),  # no keys
])
def test_the_jvm_writer_takes_s3_tables_it_has_credentials_for(
        location: str, storage: dict[str, str], jvm: bool) -> None:
    assert _jvm_can_write(location, storage) is jvm


@pytest.mark.parametrize(("codec", "jvm"), [
    ("zstd", True), ("ZSTD", True), ("snappy", True), ("gzip", True), ("lz4", True),
    ("uncompressed", True), ("brotli", False), ("lzo", False)])
def test_the_jvm_writer_takes_the_codecs_it_has(codec: str, jvm: bool) -> None:
    properties = {"write.parquet.compression-codec": codec}
    assert _jvm_can_write("s3://lake/wh/db/t/data", VENDED, properties) is jvm
