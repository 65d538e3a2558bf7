"""The catalog's wire protocol with hand-made requests
(docs/contract.md#errors-say-whether-to-retry): configuration, the Iceberg error model, bad input,
atomic multi-table transactions, the metrics endpoint and the roles."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError, UnauthorizedError

from metaservice.app import create_app
from metaservice.auth.policy import Role
from metaservice.auth.service import create_token
from metaservice.catalog.endpoints import ENDPOINTS
from metaservice.clock import ManualClock
from metaservice.db.session import Database
from metaservice.settings import Settings
from tests.conftest import ServerThread
from tests.metaservice.catalog.conftest import rest_catalog
from tests.metaservice.catalog.test_pyiceberg import SCHEMA, barriers, rows
from tests.metaservice.jobs.test_jobs import plan
from tests.metaservice.test_errors import assert_error

TABLES = "/iceberg/v1/namespaces/db/tables"


def iceberg_error(response: httpx.Response, status: int, type_: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "code"}, body
    assert body["error"]["code"] == status and body["error"]["type"] == type_, body
    assert "Traceback" not in response.text
    return body["error"]["message"]


def test_config_lists_the_endpoints_served(client: httpx.Client) -> None:
    config = client.get("/iceberg/v1/config", params={"warehouse": "lake"}).json()
    assert config["endpoints"] == ENDPOINTS and config["defaults"] == {}
    iceberg_error(client.get("/iceberg/v1/config", params={"warehouse": "elsewhere"}), 400,
                  "BadRequestException")


def test_every_listed_endpoint_is_routed(app) -> None:  # type: ignore[no-untyped-def]
    import re

    def shape(path: str) -> str:
        """A path with its parameters' names erased: the specification's ``{plan-id}`` is a
        route's ``{plan_id}`` (a path parameter's name is an identifier)."""
        return re.sub(r"\{[^}]*\}", "{}", path)

    routed = {(method.upper(), shape(path.removeprefix("/iceberg")))
              for path, operations in app.openapi()["paths"].items()
              if path.startswith("/iceberg/") for method in operations}
    for endpoint in ENDPOINTS:
        method, path = endpoint.split(" ")
        assert (method, shape(path.replace("/{prefix}", ""))) in routed, endpoint


def test_the_conformance_page_lists_what_config_lists() -> None:
    """docs/conformance.md's endpoint table: the rows served are ``/v1/config``'s endpoints
    (and ``GET /v1/config`` itself), the rows not served are not among them."""
    import re
    from pathlib import Path

    page = (Path(__file__).parents[3] / "docs" / "conformance.md").read_text()
    rows = re.findall(r"^\| `(GET|HEAD|POST|DELETE)` \| `([^`]+)` \| ([^|]+) \|", page, re.M)
    served = {f"{m} {path}" for m, path, state in rows if state.strip() == "served"}
    not_served = {f"{m} {path}" for m, path, state in rows if "not served" in state}
    assert served | not_served == {f"{m} {path}" for m, path, _ in rows}
    assert served == {*ENDPOINTS, "GET /v1/config"}
    assert not not_served & set(ENDPOINTS)


def test_errors_use_the_iceberg_model(client: httpx.Client) -> None:
    iceberg_error(client.get("/iceberg/v1/namespaces/nope"), 404, "NoSuchNamespaceException")
    iceberg_error(client.get("/iceberg/v1/namespaces/nope/tables"), 404,
                  "NoSuchNamespaceException")
    client.post("/iceberg/v1/namespaces", json={"namespace": ["db"]})
    iceberg_error(client.get(f"{TABLES}/nope"), 404, "NoSuchTableException")
    iceberg_error(client.post(f"{TABLES}/nope", json={"requirements": [], "updates": []}), 404,
                  "NoSuchTableException")
    iceberg_error(client.post("/iceberg/v1/namespaces", json={"namespace": ["db"]}), 409,
                  "AlreadyExistsException")
    assert client.head("/iceberg/v1/namespaces/db").status_code == 204
    assert client.head("/iceberg/v1/namespaces/nope").status_code == 404
    assert client.head(f"{TABLES}/nope").status_code == 404
    iceberg_error(client.post("/iceberg/v1/namespaces/db/properties",
                              json={"removals": ["a"], "updates": {"a": "1"}}), 422,
                  "UnprocessableEntityException")


def test_a_property_removed_twice_in_one_request_is_removed_once(client: httpx.Client) -> None:
    client.post("/iceberg/v1/namespaces", json={"namespace": ["db"], "properties": {"a": "1"}})
    answer = client.post("/iceberg/v1/namespaces/db/properties",
                         json={"removals": ["a", "a", "b", "b"], "updates": {}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["removed"] == ["a"] and answer.json()["missing"] == ["b"]
    assert "a" not in client.get("/iceberg/v1/namespaces/db").json()["properties"]


@pytest.mark.parametrize("namespace, table", [
    (["db", ".."], "t"),  # a level that would leave the warehouse as a directory
    (["db"], "a/b"),
    (["db"], "t\tab"),  # a control character
    (["db"], ".."),
    (["db"], "x" * 129),
    (["y" * 128, "y" * 127], "t"),  # 256 characters with the separator: past NAMESPACE_MAX
], ids=["dot-dot level", "slash", "control character", "dot-dot table", "long name",
        "long namespace"])
def test_names_that_break_the_table_name_rules_are_refused(client: httpx.Client,
                                                           namespace: list[str],
                                                           table: str) -> None:
    client.post("/iceberg/v1/namespaces", json={"namespace": ["db"]})
    if namespace != ["db"]:
        iceberg_error(client.post("/iceberg/v1/namespaces", json={"namespace": namespace}),
                      400, "BadRequestException")
    path = "%1F".join(namespace)
    created = client.post(f"/iceberg/v1/namespaces/{path}/tables", json={
        "name": table, "schema": {"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False}]}})
    iceberg_error(created, 400, "BadRequestException")


def _table(client: httpx.Client, name: str) -> dict[str, Any]:
    response = client.get(f"{TABLES}/{name}")
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def two_tables(catalog: RestCatalog, client: httpx.Client) -> RestCatalog:
    catalog.create_namespace("db")
    for name in ("a", "b"):
        catalog.create_table(f"db.{name}", schema=SCHEMA).append(rows(1))
    return catalog


@pytest.mark.parametrize("body", [
    {"updates": [{"action": "no-such-update"}]},
    {"requirements": [{"type": "assert-ref-snapshot-id"}]},
    {"updates": [{"action": "set-current-schema", "schema-id": 99}]},
    {"updates": [{"action": "set-properties"}]},
    {"updates": "nope"},
    [],
])
def test_malformed_commits_are_bad_requests(client: httpx.Client, two_tables: RestCatalog,
                                            body: Any) -> None:
    before = _table(client, "a")["metadata-location"]
    iceberg_error(client.post(f"{TABLES}/a", json=body), 400, "BadRequestException")
    assert _table(client, "a")["metadata-location"] == before


def test_a_failed_requirement_is_a_commit_conflict(client: httpx.Client,
                                                   two_tables: RestCatalog) -> None:
    response = client.post(f"{TABLES}/a", json={
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 1}],
        "updates": [{"action": "set-properties", "updates": {"k": "v"}}]})
    iceberg_error(response, 409, "CommitFailedException")


def _appended(metadata: dict[str, Any], snapshot_id: int) -> list[dict[str, Any]]:
    """Updates adding an ``append`` snapshot on top of main (its files are the parent's)."""
    parent = next(s for s in metadata["snapshots"]
                  if s["snapshot-id"] == metadata["current-snapshot-id"])
    snapshot = {**parent, "snapshot-id": snapshot_id, "parent-snapshot-id": parent["snapshot-id"],
                "sequence-number": metadata["last-sequence-number"] + 1,
                "timestamp-ms": parent["timestamp-ms"] + 1, "summary": {"operation": "append"}}
    return [{"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
             "snapshot-id": snapshot_id}]


def _change(name: str, updates: list[dict[str, Any]]) -> dict[str, Any]:
    return {"identifier": {"namespace": ["db"], "name": name}, "requirements": [],
            "updates": updates}


def test_a_transaction_commits_every_table(client: httpx.Client,
                                           two_tables: RestCatalog) -> None:
    a, b = _table(client, "a")["metadata"], _table(client, "b")["metadata"]
    response = client.post("/iceberg/v1/transactions/commit", json={"table-changes": [
        _change("a", _appended(a, 11)), _change("b", _appended(b, 22))]})
    assert response.status_code == 204, response.text
    assert _table(client, "a")["metadata"]["current-snapshot-id"] == 11
    assert _table(client, "b")["metadata"]["current-snapshot-id"] == 22
    assert barriers(client, "lake.db.a")[0][1] == 11
    assert barriers(client, "lake.db.b")[0][1] == 22


def test_a_transaction_with_one_refused_table_commits_none(client: httpx.Client,
                                                           two_tables: RestCatalog) -> None:
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    assert client.post("/jobs/etl/start", json={"from": "latest"}).status_code == 200
    a, b = _table(client, "a"), _table(client, "b")
    before = {name: barriers(client, f"lake.db.{name}") for name in ("a", "b")}
    response = client.post("/iceberg/v1/transactions/commit", json={"table-changes": [
        _change("a", _appended(a["metadata"], 11)), _change("b", _appended(b["metadata"], 22))]})
    assert "metaservice table_has_writer" in iceberg_error(response, 400,
                                                           "BadRequestException")
    assert _table(client, "a")["metadata-location"] == a["metadata-location"]
    assert _table(client, "b")["metadata-location"] == b["metadata-location"]
    assert {name: barriers(client, f"lake.db.{name}") for name in ("a", "b")} == before
    duplicate = client.post("/iceberg/v1/transactions/commit", json={"table-changes": [
        _change("a", []), _change("a", [])]})
    iceberg_error(duplicate, 400, "BadRequestException")


def test_metrics_reports_are_accepted_whatever_they_hold(client: httpx.Client,
                                                         two_tables: RestCatalog) -> None:
    for body in ({"report-type": "scan-report", "table-name": "db.a", "snapshot-id": 1},
                 {"report-type": "commit-report"}, {"anything": ["at", "all"]}):
        assert client.post(f"{TABLES}/a/metrics", json=body).status_code == 204
    scraped = client.get("/metrics").text
    assert 'metaservice_iceberg_metrics_reports_total{kind="scan-report"} 1.0' in scraped
    assert 'metaservice_iceberg_metrics_reports_total{kind="other"} 1.0' in scraped


def test_purge_deletes_the_tables_files(catalog: RestCatalog, client: httpx.Client,
                                        warehouse) -> None:  # type: ignore[no-untyped-def]
    catalog.create_namespace("db")
    table = catalog.create_table("db.p", schema=SCHEMA)
    table.append(rows(1, 2))
    files = [p for p in (warehouse / "db" / "p").rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files)
    catalog.purge_table("db.p")
    assert not catalog.table_exists("db.p")
    deadline = time.monotonic() + 20  # the files are deleted once the drop is answered
    while [p for p in (warehouse / "db" / "p").rglob("*") if p.is_file()]:
        assert time.monotonic() < deadline, "the purge left files behind"
        time.sleep(0.05)


# -- roles (docs/contract.md#trust: reads a reader, commits a writer, drops an admin) --------------


@pytest.fixture
def secured(database: Database, database_url: str, clock: ManualClock,
            warehouse) -> Iterator[tuple[str, dict[str, str]]]:  # type: ignore[no-untyped-def]
    settings = Settings(database_url=database_url, auth="required", warehouse=str(warehouse))
    app = create_app(settings, clock=clock, database=database)
    with database.transaction(write=True) as session:
        tokens = {role.name: create_token(session, f"t-{role.name}", role, clock.now_ms()).token
                  for role in Role}
        tokens["writer2"] = create_token(session, "t-writer2", Role.writer, clock.now_ms()).token
    with ServerThread(app) as server:
        yield server.url, tokens


def test_roles_with_the_bearer_tokens_iceberg_clients_send(
        secured: tuple[str, dict[str, str]]) -> None:
    url, tokens = secured
    # pyiceberg without token= sends "Bearer None": the answer says no token was given
    with pytest.raises(UnauthorizedError, match="no token was given.*Bearer None"):
        rest_catalog(url).list_namespaces()
    admin = rest_catalog(url, token=tokens["admin"])
    writer = rest_catalog(url, token=tokens["writer"])
    reader = rest_catalog(url, token=tokens["reader"])
    writer.create_namespace("db")
    writer.create_table("db.t", schema=SCHEMA).append(rows(1))
    assert reader.load_table("db.t").scan().to_arrow().num_rows == 1
    with pytest.raises(ForbiddenError):
        reader.load_table("db.t").append(rows(2))
    with pytest.raises(ForbiddenError):
        writer.drop_table("db.t")
    admin.drop_table("db.t")
    with httpx.Client(base_url=url) as http:
        iceberg_error(http.get("/iceberg/v1/namespaces"), 401, "NotAuthorizedException")


def test_a_writer_commits_only_for_jobs_it_registered(
        secured: tuple[str, dict[str, str]]) -> None:
    url, tokens = secured
    writer = rest_catalog(url, token=tokens["writer"])
    writer.create_namespace("db")
    writer.create_table("db.out", schema=SCHEMA, properties={"commit.retry.num-retries": "0"})
    own = {"Authorization": f"Bearer {tokens['writer']}"}
    with httpx.Client(base_url=url, headers=own) as http:
        assert http.post("/register/sink/etl/lake/db/out").status_code == 200
    job = {"metaservice.job": "etl"}
    other = rest_catalog(url, token=tokens["writer2"])
    with pytest.raises(ForbiddenError, match="metaservice forbidden"):
        other.load_table("db.out").append(rows(1), snapshot_properties=job)
    assert other.load_table("db.out").current_snapshot() is None


def test_a_pyarrow_schema_with_many_columns_round_trips(catalog: RestCatalog) -> None:
    catalog.create_namespace("db")
    wide = pa.schema([pa.field(f"c{i}", pa.int64()) for i in range(2000)])
    table = catalog.create_table("db.wide", schema=wide)
    assert len(catalog.load_table("db.wide").schema().fields) == 2000
    assert table.metadata_location


def test_a_schema_beyond_the_body_limit_is_refused_and_creates_nothing(
        catalog: RestCatalog, client: httpx.Client) -> None:
    catalog.create_namespace("db")
    fields = [{"id": i, "name": f"column_{i}", "type": "long", "required": False}
              for i in range(1, 30_001)]  # ~2 MB of schema: over METASERVICE_MAX_BODY_BYTES
    response = client.post(f"{TABLES}", json={
        "name": "huge", "schema": {"type": "struct", "schema-id": 0, "fields": fields}})
    assert response.status_code == 413, response.text[:300]
    assert not catalog.table_exists("db.huge")


def test_a_catalog_table_records_its_barriers_with_its_commits_only(
        client: httpx.Client, two_tables: RestCatalog) -> None:
    """``held_by_catalog``: a root report of another snapshot, or a job's ``POST /commit`` of a
    snapshot the catalog did not record, is refused; a heartbeat of the latest is not."""
    latest = _table(client, "a")["metadata"]["current-snapshot-id"]
    report = client.post("/tables/lake/db/a/barriers", json={"snapshot_id": latest + 1})
    assert_error(report, 409, "held_by_catalog")
    assert client.post("/tables/lake/db/a/barriers",
                       json={"snapshot_id": latest}).status_code == 200
    for role, table in (("source", "b"), ("sink", "a")):
        assert client.post(f"/register/{role}/ingest/lake/db/{table}").status_code == 200
    client.post("/jobs/ingest/start", json={"from": "latest"})
    committed = client.post("/commit/ingest/lake/db/a",
                            json={"snapshot_id": latest + 2, "barrier": None})
    assert_error(committed, 409, "held_by_catalog")
