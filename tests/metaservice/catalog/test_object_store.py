"""How the server's settings become an object store's FileIO properties
(metaservice/catalog/object_store.py): the AWS variables, path-style addressing, per-location
properties and the secret file; secrets never shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metaservice.catalog.storage.object_store import (
    ObjectStores,
    base_properties,
    location_properties,
)
from metaservice.settings import Settings

AWS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "very-secret",
       "AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}


@pytest.fixture(autouse=True)
def no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*AWS, "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN",
                 "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)


def test_the_aws_variables_give_the_file_io_its_properties(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in AWS.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    properties = base_properties(settings)
    assert properties["s3.endpoint"] == "http://127.0.0.1:9000"
    assert properties["s3.access-key-id"] == "AKIDEXAMPLE"
    assert properties["s3.secret-access-key"] == "very-secret"
    # An endpoint of its own: path-style, and a region (pyiceberg never asks AWS for one).
    assert properties["s3.force-virtual-addressing"] == "false"
    assert properties["s3.region"] == "us-east-1"
    assert properties["s3.connect-timeout"] == "5" and properties["s3.request-timeout"] == "20"
    assert "very-secret" not in repr(settings) and "very-secret" not in str(settings)

    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3.internal:8333")  # wins over the other
    monkeypatch.setenv("METASERVICE_S3_PATH_STYLE", "false")
    properties = base_properties(Settings())
    assert properties["s3.region"] == "eu-west-3"
    assert properties["s3.endpoint"] == "http://s3.internal:8333"
    assert properties["s3.force-virtual-addressing"] == "true"


def test_aws_itself_is_addressed_virtual_hosted_and_without_an_endpoint() -> None:
    properties = base_properties(Settings(aws_region="us-west-2"))
    assert "s3.endpoint" not in properties and "s3.access-key-id" not in properties
    assert properties["s3.force-virtual-addressing"] == "true"
    assert properties["s3.region"] == "us-west-2"


def test_per_location_properties_and_the_secret_file_overlay_the_aws_variables(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in AWS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("METASERVICE_STORAGE_PROPERTIES", json.dumps({
        "s3://other": {"s3.endpoint": "http://other:9000", "s3.region": "r1"},
        "s3a://other/deep/": {"s3.region": "r2"}}))
    secrets = tmp_path / "s3.json"
    secrets.write_text(json.dumps({"s3://other": {"s3.access-key-id": "OTHER",
                                                  "s3.secret-access-key": "other-secret"}}))
    monkeypatch.setenv("METASERVICE_STORAGE_SECRET_FILE", str(secrets))
    settings = Settings()
    stores = ObjectStores(base_properties(settings), location_properties(settings))
    lake = stores.properties("s3://lake/wh/t")
    assert lake["s3.endpoint"] == "http://127.0.0.1:9000"
    assert lake["s3.access-key-id"] == "AKIDEXAMPLE"
    other = stores.properties("s3://other/wh/t")
    assert other["s3.endpoint"] == "http://other:9000" and other["s3.region"] == "r1"
    assert other["s3.access-key-id"] == "OTHER" and other["s3.secret-access-key"] == "other-secret"
    assert stores.properties("s3://other/deep/t")["s3.region"] == "r2"  # the longest prefix last
    assert stores.properties("s3://otherwise/t")["s3.region"] == "us-east-1"  # not a prefix

    secrets.write_text('{"s3://other": "not properties, and secret-ish"}')
    with pytest.raises(ValueError, match="not a JSON object") as raised:
        location_properties(Settings())
    assert "secret-ish" not in str(raised.value)
    secrets.write_text("{not json: very-secret")
    with pytest.raises(ValueError, match="cannot be read as JSON") as raised:
        location_properties(Settings())
    assert "very-secret" not in str(raised.value)
