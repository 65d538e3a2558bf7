"""The Iceberg REST specification's newer endpoints, served by the catalog through raw HTTP and
pyiceberg's ``RestCatalog`` on both backends: ``unregisterTable`` (a drop that deletes no file
and answers the table's last metadata), a namespace's functions (none), and a view's ``ETag``
and ``Idempotency-Key``, with their refusals: unknown namespaces and names, a table a running
job uses, and principals without the role."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

from metaservice.catalog.config import ENDPOINTS
from tests.metaservice.catalog.test_rest_protocol import iceberg_error
from tests.metaservice.catalog.test_sql_views import create_body, ok, replace_updates
from tests.metaservice.catalog.test_sql_views import db as db  # noqa: F401
from tests.metaservice.catalog.test_trust import Lake, derived, refused
from tests.metaservice.catalog.test_trust import lake as lake  # noqa: F401
from tests.metaservice.catalog.test_trust import lake_factory as lake_factory  # noqa: F401

SCHEMA = pa.schema([pa.field("id", pa.int64())])
NS = "/iceberg/v1/namespaces/db"
TABLES = f"{NS}/tables"
VIEWS = f"{NS}/views"
FUNCTIONS = f"{NS}/functions"


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


def test_config_lists_the_new_endpoints(client: httpx.Client) -> None:
    listed = ok(client.get("/iceberg/v1/config"))["endpoints"]
    assert listed == ENDPOINTS
    for endpoint in ("POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/unregister",
                     "GET /v1/{prefix}/namespaces/{namespace}/functions",
                     "GET /v1/{prefix}/namespaces/{namespace}/functions/{function}",
                     "POST /v1/{prefix}/namespaces/{namespace}/register-view"):
        assert endpoint in listed


# -- unregisterTable ------------------------------------------------------------------------------


def test_unregister_forgets_the_table_and_keeps_every_file(
        catalog: RestCatalog, client: httpx.Client, warehouse: Path) -> None:
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(pa.table({"id": [1, 2]}, schema=SCHEMA))
    current = ok(client.get(f"{TABLES}/t"))
    files = sorted(p for p in warehouse.rglob("*") if p.is_file())
    answer = ok(client.post(f"{TABLES}/t/unregister"))
    assert answer["metadata-location"] == current["metadata-location"]
    assert answer["metadata"] == current["metadata"]  # every commit before the unregister
    assert not catalog.table_exists("db.t")
    assert sorted(p for p in warehouse.rglob("*") if p.is_file()) == files  # none deleted
    iceberg_error(client.post(f"{TABLES}/t", json={"requirements": [], "updates": []}), 404,
                  "NoSuchTableException")  # commits after it fail
    iceberg_error(client.post(f"{TABLES}/t/unregister"), 404, "NoSuchTableException")
    # The files are whole: the table registers again, with its rows.
    again = catalog.register_table(("db", "t"), answer["metadata-location"])
    assert sorted(again.scan().to_arrow()["id"].to_pylist()) == [1, 2]


def test_unregister_refuses_what_names_no_table(catalog: RestCatalog,
                                                client: httpx.Client) -> None:
    iceberg_error(client.post("/iceberg/v1/namespaces/nope/tables/t/unregister"), 404,
                  "NoSuchTableException")
    catalog.create_namespace("db")
    iceberg_error(client.post(f"{TABLES}/nope/unregister"), 404, "NoSuchTableException")
    for bad in ("a%00b", "a.b%1Fc"):
        answer = client.post(f"{TABLES}/{bad}/unregister")
        assert answer.status_code in (400, 404), answer.text
        assert "error" in answer.json()
    ok(client.post(VIEWS, json=create_body("v")))  # a view is not a table
    iceberg_error(client.post(f"{TABLES}/v/unregister"), 404, "NoSuchTableException")
    assert client.get(f"{VIEWS}/v").status_code == 200


def test_unregister_with_an_idempotency_key_answers_its_retry(
        catalog: RestCatalog, client: httpx.Client) -> None:
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA)
    catalog.create_table("db.u", schema=SCHEMA)
    once = key()
    first = ok(client.post(f"{TABLES}/t/unregister", headers=once))
    again = ok(client.post(f"{TABLES}/t/unregister", headers=once))  # not 404: replayed
    assert again["metadata-location"] == first["metadata-location"]
    assert again["metadata"] == first["metadata"]
    refused(client.post(f"{TABLES}/u/unregister", headers=once), 422, "idempotency_key_reused")
    assert catalog.table_exists("db.u")
    # A final refusal is answered again, even once its cause is gone.
    missing = key()
    iceberg_error(client.post(f"{TABLES}/x/unregister", headers=missing), 404,
                  "NoSuchTableException")
    catalog.create_table("db.x", schema=SCHEMA)
    iceberg_error(client.post(f"{TABLES}/x/unregister", headers=missing), 404,
                  "NoSuchTableException")
    assert catalog.table_exists("db.x")


def test_unregister_is_refused_where_a_drop_is(lake: Lake) -> None:
    derived(lake)
    for who in ("reader", "w1"):  # a drop's role: admin
        assert lake.http[who].post(f"{TABLES}/dst/unregister").status_code == 403
    refused(lake.http["admin"].post(f"{TABLES}/dst/unregister"), 400, "table_in_use")
    refused(lake.http["admin"].post(f"{TABLES}/src/unregister"), 400, "table_in_use")
    assert lake.http["reader"].get(f"{TABLES}/dst").status_code == 200
    assert lake.http["w1"].post("/unregister/etl").status_code == 200
    answer = lake.http["admin"].post(f"{TABLES}/dst/unregister")
    assert answer.status_code == 200, answer.text
    assert lake.http["reader"].get(f"{TABLES}/dst").status_code == 404
    assert httpx.post(f"{lake.url}{TABLES}/src/unregister").status_code == 401


# -- functions ------------------------------------------------------------------------------------


def test_a_namespace_has_no_functions(catalog: RestCatalog, client: httpx.Client) -> None:
    iceberg_error(client.get(FUNCTIONS), 404, "NoSuchNamespaceException")
    iceberg_error(client.get(f"{FUNCTIONS}/add_one"), 404, "NoSuchNamespaceException")
    catalog.create_namespace("db")
    assert ok(client.get(FUNCTIONS)) == {"identifiers": [], "next-page-token": None}
    paged = ok(client.get(FUNCTIONS, params={"pageToken": "", "pageSize": 10}))
    assert paged["identifiers"] == []
    iceberg_error(client.get(FUNCTIONS, params={"pageSize": 0}), 400, "BadRequestException")
    iceberg_error(client.get(FUNCTIONS, params={"pageToken": "forged"}), 400,
                  "BadRequestException")
    iceberg_error(client.get(f"{FUNCTIONS}/add_one"), 404, "NoSuchFunctionException")
    iceberg_error(client.get("/iceberg/v1/namespaces/a%1Fb/functions"), 404,
                  "NoSuchNamespaceException")
    iceberg_error(client.get(f"{FUNCTIONS}/a%00b"), 400, "BadRequestException")  # every NUL


def test_functions_need_a_reader(lake: Lake) -> None:
    lake.catalogs["w1"].create_namespace("db")
    assert lake.http["reader"].get(FUNCTIONS).status_code == 200
    assert lake.http["reader"].get(f"{FUNCTIONS}/f").status_code == 404
    assert httpx.get(f"{lake.url}{FUNCTIONS}").status_code == 401


# -- views: ETag and Idempotency-Key --------------------------------------------------------------


def test_a_view_answer_has_an_etag_and_a_conditional_load_is_304(db: httpx.Client) -> None:
    created = db.post(VIEWS, json=create_body("v"))
    assert created.status_code == 200, created.text
    loaded = db.get(f"{VIEWS}/v")
    tag = loaded.headers["ETag"]
    assert tag == created.headers["ETag"]
    not_modified = db.get(f"{VIEWS}/v", headers={"If-None-Match": tag})
    assert not_modified.status_code == 304 and not not_modified.content
    assert not_modified.headers["ETag"] == tag
    assert db.get(f"{VIEWS}/v", headers={"If-None-Match": f'W/{tag}, "x"'}).status_code == 304
    replaced = db.post(f"{VIEWS}/v", json={"requirements": [],
                                           "updates": replace_updates("SELECT 2 AS id, 'a' AS x")})
    assert replaced.status_code == 200, replaced.text
    assert replaced.headers["ETag"] != tag
    fresh = db.get(f"{VIEWS}/v", headers={"If-None-Match": tag})
    assert fresh.status_code == 200 and fresh.headers["ETag"] == replaced.headers["ETag"]
    assert fresh.json()["metadata-location"] == replaced.json()["metadata-location"]
    iceberg_error(db.get(f"{VIEWS}/nope", headers={"If-None-Match": "*"}), 404,
                  "NoSuchViewException")
    # A table's answer of the same location never carries a view's tag.
    ok(db.post(TABLES, json={"name": "t", "schema": create_body("t")["schema"]}))
    assert db.get(f"{TABLES}/t").headers["ETag"] != tag


def test_view_mutations_with_an_idempotency_key_answer_their_retry(
        db: httpx.Client, warehouse: Path) -> None:
    once = key()
    first = ok(db.post(VIEWS, json=create_body("v"), headers=once))
    again = ok(db.post(VIEWS, json=create_body("v"), headers=once))  # not 409: replayed
    assert again == first
    iceberg_error(db.post(VIEWS, json=create_body("v")), 409, "AlreadyExistsException")
    refused(db.post(VIEWS, json=create_body("w"), headers=once), 422, "idempotency_key_reused")

    commit = {"requirements": [], "updates": replace_updates("SELECT 2 AS id, 'a' AS x")}
    once = key()
    replaced = ok(db.post(f"{VIEWS}/v", json=commit, headers=once))
    replayed = ok(db.post(f"{VIEWS}/v", json=commit, headers=once))
    assert replayed["metadata-location"] == replaced["metadata-location"]
    versions = ok(db.get(f"{VIEWS}/v"))["metadata"]["versions"]
    assert len(versions) == 2  # committed once

    rename = {"source": {"namespace": ["db"], "name": "v"},
              "destination": {"namespace": ["db"], "name": "r"}}
    once = key()
    assert db.post("/iceberg/v1/views/rename", json=rename, headers=once).status_code == 204
    assert db.post("/iceberg/v1/views/rename", json=rename, headers=once).status_code == 204
    assert db.head(f"{VIEWS}/r").status_code == 204

    once = key()
    assert db.delete(f"{VIEWS}/r", headers=once).status_code == 204
    assert db.delete(f"{VIEWS}/r", headers=once).status_code == 204
    iceberg_error(db.delete(f"{VIEWS}/r"), 404, "NoSuchViewException")

    # A final refusal is answered again, even once its cause is gone.
    once = key()
    iceberg_error(db.delete(f"{VIEWS}/x", headers=once), 404, "NoSuchViewException")
    ok(db.post(VIEWS, json=create_body("x")))
    iceberg_error(db.delete(f"{VIEWS}/x", headers=once), 404, "NoSuchViewException")
    assert db.head(f"{VIEWS}/x").status_code == 204
    bad = db.delete(f"{VIEWS}/x", headers={"Idempotency-Key": "not-a-uuid"})
    assert bad.status_code == 400

    # register-view: the retry is answered, not refused as a view registered twice.
    location = ok(db.get(f"{VIEWS}/x"))["metadata-location"]
    assert db.delete(f"{VIEWS}/x").status_code == 204
    once = key()
    body = {"name": "back", "metadata-location": location}
    registered = ok(db.post(f"{NS}/register-view", json=body, headers=once))
    assert ok(db.post(f"{NS}/register-view", json=body, headers=once)) == registered
    assert registered["metadata-location"] == location


def test_register_view_refuses_a_file_that_is_no_view(db: httpx.Client) -> None:
    table = ok(db.post(TABLES, json={"name": "t", "schema": create_body("t")["schema"]}))
    iceberg_error(db.post(f"{NS}/register-view",
                          json={"name": "v", "metadata-location": table["metadata-location"]}),
                  400, "BadRequestException")
    iceberg_error(db.post("/iceberg/v1/namespaces/nope/register-view",
                          json={"name": "v", "metadata-location": table["metadata-location"]}),
                  404, "NoSuchNamespaceException")
    assert db.head(f"{VIEWS}/v").status_code == 404


def test_a_read_session_serves_functions_and_refuses_an_unregister(
        catalog: RestCatalog, client: httpx.Client) -> None:
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA)
    prefix = ok(client.get("/iceberg/v1/config", params={"warehouse": "lake@strong"}))[
        "overrides"]["prefix"]
    under = f"/iceberg/v1/{prefix}/namespaces/db"
    assert ok(client.get(f"{under}/functions"))["identifiers"] == []
    iceberg_error(client.get(f"{under}/functions/f"), 404, "NoSuchFunctionException")
    iceberg_error(client.get(f"/iceberg/v1/{prefix}/namespaces/nope/functions"), 404,
                  "NoSuchNamespaceException")
    iceberg_error(client.post(f"{under}/tables/t/unregister"), 403, "ForbiddenException")
    assert catalog.table_exists("db.t")
