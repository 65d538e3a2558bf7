"""Iceberg views (the SQL objects of the Iceberg view specification) served by the catalog,
through pyiceberg's ``RestCatalog`` and raw HTTP, on both backends: list, create, load, replace
(a commit), rename, drop, exists and register, and the trust rules a table obeys
(docs/contract.md#a-drop-ends-a-table): roles, files inside the warehouse, no name shared with a
table, no view registered twice, every bad request a 4xx in the Iceberg error model, only a lost
race a 409 ``CommitFailedException``. Spark 3.5's ``CREATE VIEW`` is in ``test_spark.py``."""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyiceberg.catalog.rest import Capability, RestCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchViewError,
    TableAlreadyExistsError,
    ViewAlreadyExistsError,
)
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import ViewVersion

from metaservice.catalog.views import service as sql_view_service
from tests.metaservice.catalog.test_rest_protocol import iceberg_error
from tests.metaservice.catalog.test_trust import Lake, refused
from tests.metaservice.catalog.test_trust import lake_factory as lake_factory  # noqa: F401

NS = "/iceberg/v1/namespaces/db"
VIEWS = f"{NS}/views"
TABLE_SCHEMA: dict[str, Any] = {"type": "struct", "schema-id": 0,
                "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def sql_version(sql: str, *dialects: str, schema_id: int = 0) -> dict[str, Any]:
    return {"version-id": 1, "schema-id": schema_id, "timestamp-ms": 1_700_000_000_000,
            "summary": {"engine-name": "test"}, "default-namespace": ["db"],
            "representations": [{"type": "sql", "sql": sql, "dialect": d}
                                for d in dialects or ("spark",)]}


def create_body(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "schema": TABLE_SCHEMA, "view-version": sql_version("SELECT 1 AS id"),
            "properties": {}, **extra}


def replace_updates(sql: str) -> list[dict[str, Any]]:
    """What Java's client sends for ``CREATE OR REPLACE VIEW`` with a new column."""
    schema = {**TABLE_SCHEMA, "schema-id": 1, "fields": [
        *TABLE_SCHEMA["fields"], {"id": 2, "name": "x", "type": "string", "required": False}]}
    return [{"action": "add-schema", "schema": schema},
            {"action": "add-view-version", "view-version": sql_version(sql, schema_id=-1)},
            {"action": "set-current-view-version", "view-version-id": -1}]


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return response.json() if response.content else {}  # type: ignore[no-any-return]


@pytest.fixture
def db(client: httpx.Client) -> httpx.Client:
    ok(client.post("/iceberg/v1/namespaces", json={"namespace": ["db"]}))
    return client


def test_pyiceberg_creates_lists_loads_registers_and_drops_views(
        catalog: RestCatalog, client: httpx.Client, warehouse: Path) -> None:
    endpoints = client.get("/iceberg/v1/config").json()["endpoints"]
    for endpoint in ("GET /v1/{prefix}/namespaces/{namespace}/views",
                     "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
                     "POST /v1/{prefix}/views/rename",
                     "POST /v1/{prefix}/namespaces/{namespace}/register-view"):
        assert endpoint in endpoints
    assert {Capability.V1_LIST_VIEWS, Capability.V1_LOAD_VIEW, Capability.V1_VIEW_EXISTS,
            Capability.V1_REGISTER_VIEW, Capability.V1_DELETE_VIEW} <= catalog._supported_endpoints

    catalog.create_namespace("db")
    assert catalog.list_views("db") == []
    version = ViewVersion.model_validate(sql_version("SELECT 1 AS id", "spark", "trino"))
    created = catalog.create_view("db.v", SCHEMA, version, properties={"comment": "c"})
    with pytest.raises(ViewAlreadyExistsError):
        catalog.create_view("db.v", SCHEMA, version)
    assert catalog.list_views("db") == [("db", "v")]
    assert catalog.view_exists("db.v") and not catalog.view_exists("db.w")
    loaded = catalog.load_view("db.v")
    assert loaded.metadata == created.metadata
    assert loaded.sql_for("TRINO").sql == "SELECT 1 AS id" and loaded.properties == {"comment": "c"}
    assert loaded.location() == str(warehouse / "db" / "v")
    answer = ok(client.get(f"{VIEWS}/v"))
    assert set(answer) == {"metadata-location", "metadata", "config"}
    location = Path(answer["metadata-location"])
    assert location.parent == warehouse / "db" / "v" / "metadata"
    assert location.name.startswith("00001-") and json.loads(location.read_text()) == \
        answer["metadata"]

    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace("db")
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_views("nowhere")
    catalog.drop_view("db.v")
    assert catalog.list_views("db") == [] and not catalog.view_exists("db.v")
    with pytest.raises(NoSuchViewError):
        catalog.load_view("db.v")
    with pytest.raises(NoSuchViewError):
        catalog.drop_view("db.v")

    # The dropped view's file is registered again, under another name.
    again = catalog.register_view("db.again", str(location))
    assert again.metadata == created.metadata
    assert ok(client.get(f"{VIEWS}/again"))["metadata-location"] == str(location)
    catalog.drop_view("db.again")
    catalog.drop_namespace("db")


def test_a_replace_commits_a_new_version_and_only_a_lost_race_is_a_commit_conflict(
        db: httpx.Client, server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    created = ok(db.post(VIEWS, json=create_body("v")))
    view_uuid = created["metadata"]["view-uuid"]
    assertion = [{"type": "assert-view-uuid", "uuid": view_uuid}]
    replaced = ok(db.post(f"{VIEWS}/v", json={"requirements": assertion,
                                             "updates": replace_updates("SELECT 2 AS id, 'x'")}))
    metadata = replaced["metadata"]
    assert metadata["current-version-id"] == 2 and metadata["view-uuid"] == view_uuid
    assert [s["schema-id"] for s in metadata["schemas"]] == [0, 1]
    assert [v["schema-id"] for v in metadata["versions"]] == [0, 1]
    assert Path(replaced["metadata-location"]).name.startswith("00002-")
    assert ok(db.get(f"{VIEWS}/v")) == replaced
    # Nothing to change: the same metadata file.
    assert ok(db.post(f"{VIEWS}/v", json={"updates": []})) == replaced

    # A requirement that no longer holds is a lost race: 409, retried by clients.
    iceberg_error(db.post(f"{VIEWS}/v", json={
        "requirements": [{"type": "assert-view-uuid", "uuid": str(uuid.uuid4())}],
        "updates": [{"action": "set-properties", "updates": {"a": "1"}}]}),
        409, "CommitFailedException")
    # A rule the commit breaks is no race: 400.
    iceberg_error(db.post(f"{VIEWS}/v", json={"requirements": assertion, "updates": [
        {"action": "set-current-view-version", "view-version-id": 99}]}),
        400, "BadRequestException")

    # Another commit lands between this one's read and its swap: this one loses (409) and the
    # other's change stays.
    write_file = sql_view_service.write_file
    interleaved: list[int] = []

    def racing_write(*args: Any) -> None:
        if not interleaved:
            interleaved.append(0)  # the other commit's own write goes straight through
            with httpx.Client(base_url=server.url, timeout=30) as other:
                interleaved[0] = other.post(f"{VIEWS}/v", json={"updates": [
                    {"action": "set-properties", "updates": {"winner": "other"}}]}).status_code
        write_file(*args)

    monkeypatch.setattr(sql_view_service, "write_file", racing_write)
    iceberg_error(db.post(f"{VIEWS}/v", json={"updates": [
        {"action": "set-properties", "updates": {"winner": "this"}}]}),
        409, "CommitFailedException")
    assert interleaved == [200]
    after = ok(db.get(f"{VIEWS}/v"))
    assert after["metadata"]["properties"] == {"winner": "other"}
    assert Path(after["metadata-location"]).name.startswith("00003-")


@pytest.mark.parametrize("method, path, body, status, type_", [
    ("POST", VIEWS, {"name": "w", "view-version": sql_version("x")}, 400,
     "BadRequestException"),  # no schema
    ("POST", VIEWS, create_body("w", **{"view-version": {**sql_version("x"), "representations": [
        {"type": "substrait", "plan": "…"}]}}), 400, "BadRequestException"),
    ("POST", VIEWS, create_body("w", **{"view-version": sql_version("x", "spark", "Spark")}),
     400, "BadRequestException"),
    ("POST", VIEWS, create_body("w", **{"view-version": {**sql_version("x"),
                                                         "representations": []}}),
     400, "BadRequestException"),
    ("POST", VIEWS, create_body("a/b"), 400, "BadRequestException"),
    ("POST", VIEWS, create_body("nul\x00"), 400, "BadRequestException"),
    ("POST", VIEWS, create_body("w", properties={"version.history.num-entries": "0"}), 400,
     "BadRequestException"),
    ("POST", VIEWS, [], 400, "BadRequestException"),
    ("POST", "/iceberg/v1/namespaces/db%1F%2E%2E/views", create_body("v"), 400,
     "BadRequestException"),
    ("POST", "/iceberg/v1/namespaces/nowhere/views", create_body("v"), 404,
     "NoSuchNamespaceException"),
    ("GET", "/iceberg/v1/namespaces/nowhere/views", None, 404, "NoSuchNamespaceException"),
    ("GET", f"{VIEWS}/nope", None, 404, "NoSuchViewException"),
    ("GET", "/iceberg/v1/namespaces/db%1Fx/views/v", None, 404, "NoSuchViewException"),
    ("DELETE", f"{VIEWS}/nope", None, 404, "NoSuchViewException"),
    ("POST", f"{VIEWS}/nope", {"updates": []}, 404, "NoSuchViewException"),
    ("POST", f"{VIEWS}/v", {"updates": [{"action": "no-such-update"}]}, 400,
     "BadRequestException"),
    ("POST", f"{VIEWS}/v", {"updates": [{"action": "add-spec", "spec": {"fields": []}}]}, 400,
     "BadRequestException"),  # a table's update
    ("POST", f"{VIEWS}/v", {"updates": "nope"}, 400, "BadRequestException"),
    ("POST", f"{VIEWS}/v", {"requirements": [{"type": "assert-table-uuid", "uuid": "x"}],
                            "updates": []}, 400, "BadRequestException"),
    ("POST", f"{VIEWS}/v", {"updates": [{"action": "add-view-version", "view-version":
                                         sql_version("x", schema_id=5)}]}, 400,
     "BadRequestException"),
    ("POST", f"{VIEWS}/v", {"updates": [{"action": "add-view-version", "view-version":
                                         sql_version("x", "trino")},
                                        {"action": "set-current-view-version",
                                         "view-version-id": -1}]},
     400, "BadRequestException"),  # drops the spark dialect
    ("POST", f"{VIEWS}/v", {"updates": [{"action": "assign-uuid", "uuid": str(uuid.uuid4())}]},
     400, "BadRequestException"),
    ("POST", "/iceberg/v1/views/rename", {"source": {"namespace": ["db"], "name": "nope"},
                                          "destination": {"namespace": ["db"], "name": "w"}},
     404, "NoSuchViewException"),
    ("POST", "/iceberg/v1/views/rename", {"source": {"namespace": ["db"], "name": "v"},
                                          "destination": {"namespace": ["nowhere"], "name": "w"}},
     404, "NoSuchNamespaceException"),
    ("POST", "/iceberg/v1/views/rename", {"source": {"namespace": ["db"], "name": "v"},
                                          "destination": {"namespace": ["db"], "name": "v"}},
     409, "AlreadyExistsException"),
    ("POST", "/iceberg/v1/views/rename", {"source": {"namespace": ["db"], "name": "v"},
                                          "destination": {"namespace": ["db"], "name": "a/b"}},
     400, "BadRequestException"),
    ("POST", "/iceberg/v1/views/rename", {"source": {"namespace": ["db"], "name": "v"},
                                          "destination": {"namespace": [1], "name": "w"}},
     400, "BadRequestException"),
    ("POST", "/iceberg/v1/views/rename", {"source": "v"}, 400, "BadRequestException"),
    # NUL bytes, which PostgreSQL can neither store nor compare: refused on every route.
    ("GET", f"{VIEWS}/a%00b", None, 400, "BadRequestException"),
    ("HEAD", f"{VIEWS}/a%00b", None, 400, None),
    ("POST", f"{VIEWS}/a%00b", {"updates": []}, 400, "BadRequestException"),
    ("DELETE", f"{VIEWS}/a%00b", None, 400, "BadRequestException"),
    ("GET", "/iceberg/v1/namespaces/d%00b/views", None, 400, "BadRequestException"),
    ("POST", "/iceberg/v1/namespaces/d%00b/views", create_body("w"), 400,
     "BadRequestException"),
    ("POST", "/iceberg/v1/views/rename", {"source": {"namespace": ["db"], "name": "a\x00"},
                                          "destination": {"namespace": ["db"], "name": "w"}},
     400, "BadRequestException"),
    ("POST", "/iceberg/v1/views/rename", {"source": {"namespace": ["db"], "name": "v"},
                                          "destination": {"namespace": ["d\x00"], "name": "w"}},
     400, "BadRequestException"),
    ("POST", f"{NS}/register-view", {"name": "r\x00", "metadata-location": "/x"}, 400,
     "BadRequestException"),
    ("POST", f"{NS}/register-view", {"name": "r"}, 400, "BadRequestException"),
    ("POST", f"{NS}/register-view", {"name": "r", "metadata-location": "\x00"}, 400,
     "BadRequestException"),
])
def test_bad_view_requests_are_4xx_in_the_iceberg_error_model(
        db: httpx.Client, method: str, path: str, body: Any, status: int,
        type_: str | None) -> None:
    before = ok(db.post(VIEWS, json=create_body("v")))
    response = db.request(method, path, json=body)
    if type_ is None:  # HEAD: no body
        assert response.status_code == status
    else:
        iceberg_error(response, status, type_)
    assert ok(db.get(f"{VIEWS}/v")) == before
    assert ok(db.get(VIEWS))["identifiers"] == [{"namespace": ["db"], "name": "v"}]


def test_register_refuses_files_that_are_no_view_or_a_view_the_catalog_has(
        db: httpx.Client, warehouse: Path, tmp_path: Path) -> None:
    view = ok(db.post(VIEWS, json=create_body("v")))
    table = ok(db.post(f"{NS}/tables", json={"name": "t", "schema": TABLE_SCHEMA}))
    register = f"{NS}/register-view"
    # The same view (same view-uuid) under another name, from its own file or from a copy.
    copy = warehouse / "db" / "copy.metadata.json"
    copy.write_text(json.dumps(view["metadata"]))
    for location in (view["metadata-location"], str(copy)):
        refused(db.post(register, json={"name": "twice", "metadata-location": location}),
                409, "view_already_registered")
    for location, reason in [(table["metadata-location"], "not Iceberg view metadata"),
                             (str(warehouse / "db" / "missing.metadata.json"), "cannot open")]:
        message = iceberg_error(db.post(register, json={"name": "r", "metadata-location":
                                                        location}), 400, "BadRequestException")
        assert reason in message
    # A file outside the warehouse is never read; a FIFO inside it is no regular file.
    outside = tmp_path / "outside.metadata.json"
    outside.write_text(json.dumps({**view["metadata"], "view-uuid": str(uuid.uuid4())}))
    for location in (str(outside), "/etc/passwd", f"file://{outside}",
                     f"{warehouse}/../outside.metadata.json"):
        refused(db.post(register, json={"name": "r", "metadata-location": location}), 400,
                "location_outside_warehouse")
    fifo = warehouse / "db" / "fifo.metadata.json"
    os.mkfifo(fifo)
    began = time.monotonic()
    message = iceberg_error(db.post(register, json={"name": "r", "metadata-location": str(fifo)}),
                            400, "BadRequestException")
    assert "not a regular file" in message and time.monotonic() - began < 10
    # A view of its own, gzip-compressed as Java's clients write them, is registered.
    # (At a location of its own: no two views or tables share one.)
    other = {**view["metadata"], "view-uuid": str(uuid.uuid4()),
             "location": str(warehouse / "db" / "other")}
    compressed = warehouse / "db" / "00007-other.gz.metadata.json"
    compressed.write_bytes(gzip.compress(json.dumps(other).encode()))
    registered = ok(db.post(register, json={"name": "r", "metadata-location": str(compressed)}))
    assert registered["metadata"] == other
    assert registered["metadata-location"] == str(compressed)
    assert sorted(i["name"] for i in ok(db.get(VIEWS))["identifiers"]) == ["r", "v"]


def test_a_view_and_a_table_never_share_a_name(db: httpx.Client, catalog: RestCatalog) -> None:
    table = ok(db.post(f"{NS}/tables", json={"name": "t", "schema": TABLE_SCHEMA}))
    view = ok(db.post(VIEWS, json=create_body("v")))
    copy = {**view["metadata"], "view-uuid": str(uuid.uuid4())}
    copy_location = Path(view["metadata-location"]).with_name("copy.metadata.json")
    copy_location.write_text(json.dumps(copy))

    # A view takes no table's name ...
    for response in (
            db.post(VIEWS, json=create_body("t")),
            db.post(f"{NS}/register-view", json={"name": "t",
                                                  "metadata-location": str(copy_location)}),
            db.post("/iceberg/v1/views/rename", json={
                "source": {"namespace": ["db"], "name": "v"},
                "destination": {"namespace": ["db"], "name": "t"}})):
        message = iceberg_error(response, 409, "AlreadyExistsException")
        assert "db.t" in message and "a table and a view never share a name" in message
    # ... and a table no view's, however it is created: created, staged and committed,
    # registered (the file of a dropped table) or renamed.
    with pytest.raises(TableAlreadyExistsError, match="View with same name already exists: db.v"):
        catalog.create_table("db.v", schema=SCHEMA)
    with pytest.raises(CommitFailedException, match="View with same name already exists: db.v"):
        catalog.create_table_transaction("db.v", schema=SCHEMA).commit_transaction()
    dropped = ok(db.post(f"{NS}/tables", json={"name": "gone", "schema": TABLE_SCHEMA}))
    ok(db.delete(f"{NS}/tables/gone"), 204)
    for response in (
            db.post(f"{NS}/tables", json={"name": "v", "schema": TABLE_SCHEMA}),
            db.post(f"{NS}/register", json={"name": "v",
                                            "metadata-location": dropped["metadata-location"]}),
            db.post("/iceberg/v1/tables/rename", json={
                "source": {"namespace": ["db"], "name": "t"},
                "destination": {"namespace": ["db"], "name": "v"}})):
        message = iceberg_error(response, 409, "AlreadyExistsException")
        assert "db.v" in message and "a table and a view never share a name" in message
    assert [i["name"] for i in ok(db.get(f"{NS}/tables"))["identifiers"]] == ["t"]
    assert [i["name"] for i in ok(db.get(VIEWS))["identifiers"]] == ["v"]
    assert ok(db.get(f"{VIEWS}/v")) == view
    assert ok(db.get(f"{NS}/tables/t"))["metadata-location"] == table["metadata-location"]


def test_racing_creates_of_a_view_and_a_table_of_one_name_never_both_win(
        db: httpx.Client, server: Any) -> None:
    for round_ in range(8):
        name = f"r{round_}"
        start = threading.Barrier(2)
        answers: dict[str, int] = {}

        def create(kind: str, path: str, body: dict[str, Any], start: threading.Barrier,
                   answers: dict[str, int]) -> None:
            with httpx.Client(base_url=server.url, timeout=30) as http:
                start.wait()
                answers[kind] = http.post(path, json=body).status_code

        threads = [threading.Thread(target=create, args=(
            kind, path, body, start, answers)) for kind, path, body in (
                ("table", f"{NS}/tables", {"name": name, "schema": TABLE_SCHEMA}),
                ("view", VIEWS, create_body(name)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(answers.values()) == [200, 409], answers
        tables = {i["name"] for i in ok(db.get(f"{NS}/tables"))["identifiers"]}
        views = {i["name"] for i in ok(db.get(VIEWS))["identifiers"]}
        assert (name in tables) != (name in views), (tables, views)
        assert (name in tables) == (answers["table"] == 200)


def test_every_file_of_a_view_lies_inside_the_warehouse(
        db: httpx.Client, warehouse: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    for body in (create_body("v", location=str(outside)),
                 create_body("v", location=f"{warehouse}/../outside"),
                 create_body("v", properties={"write.metadata.path": str(outside)})):
        refused(db.post(VIEWS, json=body), 400, "location_outside_warehouse")
    ok(db.post("/iceberg/v1/namespaces", json={"namespace": ["far"],
                                               "properties": {"location": str(outside)}}), 400)
    inside = ok(db.post(VIEWS, json=create_body("v", location=f"{warehouse}/views//v/")))
    assert inside["metadata"]["location"] == f"{warehouse}/views/v"
    for update in ({"action": "set-location", "location": str(outside)},
                   {"action": "set-properties", "updates": {"write.metadata.path":
                                                            f"file://{outside}"}}):
        refused(db.post(f"{VIEWS}/v", json={"updates": [update]}), 400,
                "location_outside_warehouse")
    assert not outside.exists()
    moved = ok(db.post(f"{VIEWS}/v", json={"updates": [
        {"action": "set-properties", "updates": {"write.metadata.path": f"{warehouse}/m"}}]}))
    assert moved["metadata-location"].startswith(f"{warehouse}/m/00002-")
    assert ok(db.get(f"{VIEWS}/v")) == moved


def test_roles_reads_a_reader_changes_a_writer_drops_an_admin(
        lake_factory: Callable[..., Lake]) -> None:
    lake = lake_factory()
    reader, w1, w2, admin = (lake.http[who] for who in ("reader", "w1", "w2", "admin"))
    ok(w1.post("/iceberg/v1/namespaces", json={"namespace": ["db"]}))
    iceberg_error(reader.post(VIEWS, json=create_body("v")), 403, "ForbiddenException")
    view = ok(w1.post(VIEWS, json=create_body("v")))
    assert ok(reader.get(VIEWS))["identifiers"] == [{"namespace": ["db"], "name": "v"}]
    assert ok(reader.get(f"{VIEWS}/v")) == view
    assert reader.head(f"{VIEWS}/v").status_code == 204
    for response in (reader.post(f"{VIEWS}/v", json={"updates": []}),
                     reader.post("/iceberg/v1/views/rename", json={
                         "source": {"namespace": ["db"], "name": "v"},
                         "destination": {"namespace": ["db"], "name": "w"}}),
                     reader.post(f"{NS}/register-view", json={
                         "name": "r", "metadata-location": view["metadata-location"]}),
                     reader.delete(f"{VIEWS}/v"), w1.delete(f"{VIEWS}/v")):
        iceberg_error(response, 403, "ForbiddenException")
    # Any writer replaces and renames a view (no job writes one); only an admin drops it.
    ok(w2.post(f"{VIEWS}/v", json={"updates": replace_updates("SELECT 2 AS id, 'x'")}))
    ok(w2.post("/iceberg/v1/views/rename", json={
        "source": {"namespace": ["db"], "name": "v"},
        "destination": {"namespace": ["db"], "name": "w"}}), 204)
    ok(admin.delete(f"{VIEWS}/w"), 204)
    assert ok(reader.get(VIEWS))["identifiers"] == []
    # Without a token, nothing.
    with httpx.Client(base_url=lake.url) as anonymous:
        iceberg_error(anonymous.get(VIEWS), 401, "NotAuthorizedException")


def test_views_under_a_read_session_are_listed_and_loaded_but_never_changed(
        db: httpx.Client) -> None:
    view = ok(db.post(VIEWS, json=create_body("v")))
    prefix = ok(db.get("/iceberg/v1/config", params={"warehouse": "lake@strong"}))[
        "overrides"]["prefix"]
    session = f"/iceberg/v1/{prefix}/namespaces/db/views"
    assert ok(db.get(session))["identifiers"] == [{"namespace": ["db"], "name": "v"}]
    assert ok(db.get(f"{session}/v")) == view
    assert db.head(f"{session}/v").status_code == 204
    assert db.head(f"{session}/nope").status_code == 404
    for response in (db.post(session, json=create_body("w")),
                     db.post(f"{session}/v", json={"updates": []}),
                     db.delete(f"{session}/v"),
                     db.post(f"/iceberg/v1/{prefix}/views/rename", json={})):
        iceberg_error(response, 403, "ForbiddenException")
    for gone, status in (
            ("/iceberg/v1/session-00000000-0000-0000-0000-000000000000/namespaces/db/views", 404),
            ("/iceberg/v1/session-%00/namespaces/db/views", 400)):  # NUL: refused everywhere
        for response in (db.get(gone), db.get(f"{gone}/v"), db.head(f"{gone}/v"),
                         db.get(gone.replace("/views", "/tables"))):
            assert response.status_code == status, (gone, response.text)
    assert ok(db.get(f"{VIEWS}/v")) == view


def test_a_views_schema_keeps_its_columns_docs_through_pyiceberg(catalog: RestCatalog) -> None:
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType(), required=False, doc="order id"),
                    NestedField(2, "name", StringType(), required=False))
    catalog.create_view("db.v", schema, ViewVersion.model_validate(sql_version("SELECT 1, 'a'")))
    loaded = catalog.load_view("db.v")
    assert loaded.schema() == schema and loaded.schema().schema_id == 0
    assert loaded.schema().find_field("id").doc == "order id"
