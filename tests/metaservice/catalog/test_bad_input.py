"""Malformed catalog requests are a 400 in the Iceberg error model on both backends, and leave
nothing behind: no pointer, no metadata file, no barrier
(docs/contract.md#errors-say-whether-to-retry: every malformed request is a 4xx). Raw HTTP, so that
nothing a client library checks first hides what the server does."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table.locations import SimpleLocationProvider

from tests.metaservice.catalog.test_pyiceberg import barriers
from tests.metaservice.catalog.test_rest_protocol import iceberg_error

NAMESPACES = "/iceberg/v1/namespaces"
TABLES = f"{NAMESPACES}/db/tables"
NUL = "\u0000"
LONG = {"type": "struct", "schema-id": 0,
        "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


@pytest.fixture(autouse=True)
def _contained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative location resolves under the test's directory (on code that accepts one)."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def table(client: httpx.Client) -> dict[str, Any]:
    """``db.t``, whose main is a snapshot (its manifest list is never read); answers its
    load."""
    assert client.post(NAMESPACES, json={"namespace": ["db"]}).status_code == 200
    created = client.post(TABLES, json={"name": "t", "schema": LONG}).json()
    snapshot = {"snapshot-id": 1, "sequence-number": 1, "timestamp-ms": 1_700_000_000_000,
                "manifest-list": f"{created['metadata']['location']}/metadata/snap-1.avro",
                "summary": {"operation": "append"}, "schema-id": 0}
    committed = client.post(f"{TABLES}/t", json={"requirements": [], "updates": [
        {"action": "add-snapshot", "snapshot": snapshot},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1}]})
    assert committed.status_code == 200, committed.text
    return {"metadata-location": committed.json()["metadata-location"],
            "metadata": committed.json()["metadata"]}


def files(root: Path) -> set[Path]:
    return {path for path in root.rglob("*")} if root.exists() else set()


def refused(response: httpx.Response) -> str:
    return iceberg_error(response, 400, "BadRequestException")


def nested_lists(depth: int) -> dict[str, Any]:
    """A schema whose one column is ``depth - 1`` lists deep (``depth`` nested types)."""
    type_: Any = "long"
    for element_id in range(2, depth + 1):
        type_ = {"type": "list", "element-id": element_id, "element": type_,
                 "element-required": False}
    return {**LONG, "fields": [{"id": 1, "name": "x", "type": type_, "required": False}]}


def decimal_schema(schema_id: int = 0) -> dict[str, Any]:
    return {**LONG, "schema-id": schema_id,
            "fields": [{"id": 1, "name": "d", "type": "decimal(99,99)", "required": False}]}


def unknown_column_spec(spec_id: int = 0) -> dict[str, Any]:
    return {"spec-id": spec_id, "fields": [
        {"source-id": 99, "field-id": 1000, "name": "p", "transform": "identity"}]}


def unknown_column_order(order_id: int = 1) -> dict[str, Any]:
    return {"order-id": order_id, "fields": [
        {"source-id": 99, "transform": "identity", "direction": "asc",
         "null-order": "nulls-first"}]}


# -- register: a file that is not table metadata ---------------------------------------------


def _metadata_like(table: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> bytes:
    document = copy.deepcopy(table["metadata"])
    change(document)
    return json.dumps(document).encode()


def _column_type(type_: Any) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        for schema in document["schemas"]:
            schema["fields"][0]["type"] = type_
    return change


def _deep_column(depth: int) -> Callable[[dict[str, Any]], None]:
    return _column_type(nested_lists(depth)["fields"][0]["type"])


NOT_METADATA: dict[str, Callable[[dict[str, Any]], bytes | None]] = {
    "text": lambda t: b"hello\n",
    "binary": lambda t: bytes(range(256)) * 4,
    "json object": lambda t: b'{"a": 1}',
    "json array": lambda t: b"[1, 2]",
    "directory": lambda t: None,
    "decimal(99,99) column": lambda t: _metadata_like(t, _column_type("decimal(99,99)")),
    "types 400 deep": lambda t: _metadata_like(t, _deep_column(400)),
    "types 40 deep": lambda t: _metadata_like(t, _deep_column(40)),
    "location of an unknown scheme": lambda t: _metadata_like(
        t, lambda d: d.update(location="foo://bucket/t")),
}


@pytest.mark.parametrize("kind", [*NOT_METADATA, "missing"])
def test_register_refuses_a_file_that_is_not_table_metadata(
        client: httpx.Client, table: dict[str, Any], warehouse: Path, kind: str) -> None:
    path = warehouse / "db" / "not-metadata.json"
    if kind == "directory":
        path.mkdir()
    elif kind != "missing":
        path.write_bytes(NOT_METADATA[kind](table))  # type: ignore[arg-type]
    before = files(warehouse)

    refused(client.post(f"{NAMESPACES}/db/register",
                        json={"name": "r", "metadata-location": str(path)}))

    assert client.get(f"{TABLES}/r").status_code == 404
    assert files(warehouse) == before


# -- create: a table pyiceberg cannot make -----------------------------------------------------


def _long_location(warehouse: Path) -> str:
    """A location in the warehouse of 2,100 characters: its metadata file's would not fit the
    database's 2,048."""
    return str(warehouse / "db" / "/".join(["d" * 200] * 11))


CREATE: dict[str, Callable[[Path], dict[str, Any]]] = {
    "decimal(99,99) column": lambda w: {"schema": decimal_schema()},
    "types 400 deep": lambda w: {"schema": nested_lists(400)},
    "types 33 deep": lambda w: {"schema": nested_lists(33)},
    "format-version 9": lambda w: {"properties": {"format-version": "9"}},
    "format-version 0": lambda w: {"properties": {"format-version": "0"}},
    # pyiceberg, and so the catalog, writes format versions 1 and 2 only
    "format-version 3": lambda w: {"properties": {"format-version": "3"}},
    "format-version 3, staged": lambda w: {"properties": {"format-version": "3"},
                                           "stage-create": True},
    "format-version x": lambda w: {"properties": {"format-version": "x"}},
    "location foo://": lambda w: {"location": "foo://bucket/t"},
    "location hdfs://": lambda w: {"location": "hdfs://namenode/t"},
    "location hdfs:": lambda w: {"location": "hdfs:t"},
    "relative location": lambda w: {"location": "relative/t"},
    "location too long": lambda w: {"location": _long_location(w)},
    "write.metadata.path foo://": lambda w: {"properties": {"write.metadata.path": "foo://m"}},
    "partition spec of an unknown column": lambda w: {"partition-spec": unknown_column_spec()},
    "sort order of an unknown column": lambda w: {"write-order": unknown_column_order()},
    "property with a NUL": lambda w: {"properties": {"owner": f"a{NUL}b"}},
    "property with a lone surrogate": lambda w: {"properties": {"owner": "\ud800"}},
}


@pytest.mark.parametrize("kind", CREATE)
def test_create_refuses_a_table_that_cannot_be(client: httpx.Client, catalog: RestCatalog,
                                               warehouse: Path, tmp_path: Path,
                                               kind: str) -> None:
    catalog.create_namespace("db")
    before = files(tmp_path)
    body = {"name": "c", "schema": LONG, **CREATE[kind](warehouse)}

    # json.dumps, not httpx's encoder: it refuses to encode a lone surrogate.
    refused(client.post(TABLES, content=json.dumps(body).encode(),
                        headers={"content-type": "application/json"}))

    assert client.get(f"{TABLES}/c").status_code == 404
    assert files(tmp_path) == before


# -- commit: updates that make no valid table ------------------------------------------------


def _snapshot_by(job: str, table: dict[str, Any]) -> list[dict[str, Any]]:
    """An ``append`` snapshot on main carrying ``metaservice.job``."""
    metadata = table["metadata"]
    parent = next(s for s in metadata["snapshots"]
                  if s["snapshot-id"] == metadata["current-snapshot-id"])
    snapshot = {**parent, "snapshot-id": 77, "parent-snapshot-id": parent["snapshot-id"],
                "sequence-number": metadata["last-sequence-number"] + 1,
                "timestamp-ms": parent["timestamp-ms"] + 1,
                "summary": {"operation": "append", "metaservice.job": job,
                            "metaservice.barrier": "100"}}
    return [{"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
             "snapshot-id": 77}]


UPDATES: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
    "set-location foo://": lambda t: [{"action": "set-location", "location": "foo://bucket/t"}],
    "set-location relative": lambda t: [{"action": "set-location", "location": "relative/t"}],
    "write.metadata.path foo://": lambda t: [
        {"action": "set-properties", "updates": {"write.metadata.path": "foo://m"}}],
    "decimal(99,99) column": lambda t: [{"action": "add-schema", "schema": decimal_schema(1)}],
    "types 400 deep": lambda t: [{"action": "add-schema",
                                  "schema": {**nested_lists(400), "schema-id": 1}}],
    "partition spec of an unknown column": lambda t: [
        {"action": "add-spec", "spec": unknown_column_spec(1)}],
    "sort order of an unknown column": lambda t: [
        {"action": "add-sort-order", "sort-order": unknown_column_order()}],
    "property with a NUL": lambda t: [
        {"action": "set-properties", "updates": {"owner": f"a{NUL}b"}}],
    "metaservice.job with a NUL": lambda t: _snapshot_by(f"etl{NUL}", t),
    "upgrade to format-version 9": lambda t: [
        {"action": "upgrade-format-version", "format-version": 9}],
    "upgrade to format-version 3 (pyiceberg writes 1 and 2)": lambda t: [
        {"action": "upgrade-format-version", "format-version": 3}],
}


@pytest.mark.parametrize("kind", UPDATES)
def test_a_commit_that_makes_no_valid_table_changes_nothing(
        client: httpx.Client, table: dict[str, Any], tmp_path: Path, kind: str) -> None:
    before = files(tmp_path), barriers(client, "lake.db.t")

    refused(client.post(f"{TABLES}/t", json={"requirements": [], "updates": UPDATES[kind](table)}))

    assert client.get(f"{TABLES}/t").json()["metadata-location"] == table["metadata-location"]
    assert (files(tmp_path), barriers(client, "lake.db.t")) == before


def _creation(*, schema: bool = True, spec: dict[str, Any] | None = None,
              default_spec: int = -1) -> list[dict[str, Any]]:
    """The updates with which a client creates a table in a commit (``assert-create``)."""
    updates: list[dict[str, Any]] = [{"action": "upgrade-format-version", "format-version": 2}]
    if schema:
        updates += [{"action": "add-schema", "schema": LONG},
                    {"action": "set-current-schema", "schema-id": -1}]
    if spec is not None:
        updates += [{"action": "add-spec", "spec": spec},
                    {"action": "set-default-spec", "spec-id": default_spec},
                    {"action": "set-location", "location": "/unused"}]
    return updates


CREATING: dict[str, list[dict[str, Any]]] = {
    "no updates": [],
    "only a schema": _creation(),
    "no schema": _creation(schema=False, spec={"spec-id": 0, "fields": []}),
    "a default spec that is not there": _creation(spec={"spec-id": 4, "fields": []},
                                                  default_spec=0),
    "a partition spec of an unknown column": _creation(spec=unknown_column_spec()),
}


@pytest.mark.parametrize("route", ["table", "transaction"])
@pytest.mark.parametrize("kind", CREATING)
def test_a_commit_creating_a_table_that_cannot_be_changes_nothing(
        client: httpx.Client, catalog: RestCatalog, warehouse: Path, tmp_path: Path,
        kind: str, route: str) -> None:
    catalog.create_namespace("db")
    updates = [{**u, "location": str(warehouse / "db" / "c")} if u["action"] == "set-location"
               else u for u in CREATING[kind]]
    change = {"identifier": {"namespace": ["db"], "name": "c"},
              "requirements": [{"type": "assert-create"}], "updates": updates}
    before = files(tmp_path)

    if route == "table":
        refused(client.post(f"{TABLES}/c", json=change))
    else:
        refused(client.post("/iceberg/v1/transactions/commit", json={"table-changes": [change]}))

    assert client.get(f"{TABLES}/c").status_code == 404
    assert files(tmp_path) == before


# -- namespaces: text no database stores -----------------------------------------------------


@pytest.mark.parametrize("text", [f"a{NUL}b", "\udc00"], ids=["NUL", "lone surrogate"])
def test_namespace_properties_a_database_cannot_store_are_refused(client: httpx.Client,
                                                                  text: str) -> None:
    def post(path: str, body: dict[str, Any]) -> httpx.Response:
        return client.post(path, content=json.dumps(body).encode(),
                           headers={"content-type": "application/json"})

    refused(post(NAMESPACES, {"namespace": ["n"], "properties": {"owner": text}}))
    assert client.get(f"{NAMESPACES}/n").status_code == 404
    assert post(NAMESPACES, {"namespace": ["db"], "properties": {"owner": "me"}}).is_success
    refused(post(f"{NAMESPACES}/db/properties", {"updates": {"owner": text}}))
    refused(post(f"{NAMESPACES}/db/properties", {"updates": {text: "x"}}))
    assert client.get(f"{NAMESPACES}/db").json()["properties"] == {"owner": "me"}


@pytest.mark.parametrize("method, path", [
    ("GET", f"{TABLES}/t%00"),
    ("HEAD", f"{TABLES}/t%00"),
    ("DELETE", f"{TABLES}/t%00?purgeRequested=true"),
    ("GET", "/iceberg/v1/view-0%00/namespaces/db/tables/t"),
], ids=["load", "exists", "drop", "load in a view"])
def test_a_name_a_database_cannot_store_in_a_path_is_refused(
        client: httpx.Client, table: dict[str, Any], method: str, path: str) -> None:
    response = client.request(method, path)
    assert response.status_code == 400, response.text
    if method != "HEAD":
        assert "NUL" in refused(response)
    assert client.get(f"{TABLES}/t").json()["metadata-location"] == table["metadata-location"]


# -- a table property naming code --------------------------------------------------------------


class RecordingProvider(SimpleLocationProvider):
    """A location provider that records being built: the server must never build one a table
    property names (pyiceberg would import any class, ``builtins.exec`` included)."""

    built: list[str] = []

    def __init__(self, table_location: str, table_properties: dict[str, str]) -> None:
        RecordingProvider.built.append(table_location)
        super().__init__(table_location, table_properties)


def test_the_server_never_builds_the_location_provider_a_table_names(
        client: httpx.Client, catalog: RestCatalog) -> None:
    RecordingProvider.built.clear()
    catalog.create_namespace("db")
    provider = {"write.py-location-provider.impl": f"{__name__}.RecordingProvider"}

    created = client.post(TABLES, json={"name": "c", "schema": LONG, "properties": provider})
    assert created.status_code == 200, created.text
    committed = client.post(f"{TABLES}/c", json={"requirements": [], "updates": [
        {"action": "set-properties", "updates": {"owner": "me"}}]})
    assert committed.status_code == 200, committed.text

    assert RecordingProvider.built == []
