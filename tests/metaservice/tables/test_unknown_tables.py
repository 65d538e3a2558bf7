"""A table the service has never heard of gets one answer on every route that takes a table:
404 ``unknown_table`` in the error shape, naming the close names of known tables when there are
some (a typo must not read as "no barrier yet")."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from metaservice import errors
from tests.metaservice.test_errors import assert_error

TYPO = "lake.db.ordres"  # of lake.db.orders
STRANGER = "lake.db.zzz_nothing_like_it"

# Routes that introduce a table (a job's plan names it, a root report creates it): the only
# ones that take a table nobody has heard of.
INTRODUCING = {("post", "/register/source/{job}/{catalog}/{database}/{table}"),
               ("post", "/register/sink/{job}/{catalog}/{database}/{table}"),
               ("post", "/tables/{catalog}/{database}/{table}/barriers")}


def requests(table: str) -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
    """Every route that takes a table (its OpenAPI path → the request naming ``table``)."""
    path = table.replace(".", "/")
    return {
        ("get", "/version/{consistency}/{catalog}/{database}/{table}"):
            (f"/version/strong/{path}", {}),
        ("post", "/versions"): ("/versions", {"json": {"tables": ["lake.db.orders", table]}}),
        ("get", "/lineage/{catalog}/{database}/{table}"): (f"/lineage/{path}", {}),
        ("get", "/lineage/{catalog}/{database}/{table}/barriers/{barrier}"):
            (f"/lineage/{path}/barriers/10", {}),
        ("get", "/delay/{catalog}/{database}/{table}"): (f"/delay/{path}", {}),
        ("get", "/tables/{catalog}/{database}/{table}/barriers"): (f"/tables/{path}/barriers", {}),
        ("get", "/tables/{catalog}/{database}/{table}/snapshots/protected"):
            (f"/tables/{path}/snapshots/protected", {}),
        ("post", "/tables/{catalog}/{database}/{table}/expirations"):
            (f"/tables/{path}/expirations", {"json": {"snapshot_ids": [1]}}),
        ("post", "/commit/{job}/{catalog}/{database}/{table}"):
            (f"/commit/enrich/{path}", {"json": {"barrier": 10, "snapshot_id": 2}}),
        ("post", "/leases"): ("/leases", {"json": {
            "holder": "report", "ttl_seconds": 60,
            "snapshots": [{"table": "lake.db.orders", "snapshot_id": 1},
                          {"table": table, "snapshot_id": 1}]}}),
        ("post", "/rollback-plans"): ("/rollback-plans",
                                      {"json": {"table": table, "barrier": 10}}),
    }


def pipeline(client: httpx.Client) -> None:
    """orders → enrich → orders_enriched, with one barrier of orders."""
    for role, table in (("source", "orders"), ("sink", "orders_enriched")):
        client.post(f"/register/{role}/enrich/lake/db/{table}").raise_for_status()
    client.post("/tables/lake/db/orders/barriers",
                json={"snapshot_id": 1, "barrier": 10}).raise_for_status()
    client.post("/jobs/enrich/start").raise_for_status()


def test_every_route_that_takes_a_table_is_covered(client: httpx.Client) -> None:
    """The routes below are all of them: a new route with a table must join the list. (The
    Iceberg REST catalog under /iceberg answers in the Iceberg protocol's own error model, which
    engines read: 404 NoSuchTableException.)"""
    document = client.get("/openapi.json").json()
    taking_a_table = {(method, path) for path, operations in document["paths"].items()
                      for method, operation in operations.items()
                      if not path.startswith("/iceberg/")
                      and ("{table}" in path or _body_names_a_table(document, operation))}
    assert taking_a_table == set(requests(TYPO)) | INTRODUCING


def _body_names_a_table(document: dict[str, Any], operation: dict[str, Any]) -> bool:
    schema = (operation.get("requestBody", {}).get("content", {})
              .get("application/json", {}).get("schema", {}))
    text = str(_resolve(document, schema, depth=3))
    return "'table'" in text or "'tables'" in text


def _resolve(document: dict[str, Any], schema: Any, depth: int) -> Any:
    if depth == 0:
        return schema
    if isinstance(schema, dict):
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            return _resolve(document, document["components"]["schemas"][name], depth - 1)
        return {k: _resolve(document, v, depth) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_resolve(document, v, depth) for v in schema]
    return schema


@pytest.mark.parametrize("route", sorted(requests(TYPO)), ids="{0[0]} {0[1]}".format)
def test_a_typo_is_unknown_and_names_the_close_table(client: httpx.Client,
                                                     route: tuple[str, str]) -> None:
    pipeline(client)
    method, (path, body) = route[0], requests(TYPO)[route]
    error = assert_error(client.request(method.upper(), path, **body), 404, "unknown_table")
    assert error["message"].startswith(f"unknown table {TYPO} (did you mean lake.db.orders ")
    assert error["details"]["tables"] == [TYPO]
    [match] = error["details"]["close_matches"][TYPO]
    assert match["table"] == "lake.db.orders" and 0.8 <= match["similarity"] < 1


@pytest.mark.parametrize("route", sorted(requests(STRANGER)), ids="{0[0]} {0[1]}".format)
def test_a_name_like_no_other_is_unknown_without_suggestions(client: httpx.Client,
                                                              route: tuple[str, str]) -> None:
    pipeline(client)
    path, body = requests(STRANGER)[route]
    error = assert_error(client.request(route[0].upper(), path, **body), 404, "unknown_table")
    assert error["message"] == (f"unknown table {STRANGER}: no job registered it and no "
                                "barrier of it was ever reported")
    assert error["details"]["close_matches"] == {STRANGER: []}


def test_a_registered_table_without_barriers_is_known(client: httpx.Client) -> None:
    """Known but not written yet is a different answer: no_version, not unknown_table."""
    pipeline(client)
    assert_error(client.get("/version/strong/lake/db/orders_enriched"), 404, "no_version")
    assert client.get("/lineage/lake/db/orders_enriched").status_code == 200


def test_close_names_are_ranked_and_bounded() -> None:
    known = ["lake.db.orders", "lake.db.ordre", "lake.db.ordrs", "lake.db.ordres2",
             "lake.db.customers", "lake.other.ordres", "lake.db.a"]
    error = errors.UnknownTableError.among(["lake.db.ordres", "lake.db.ordres"], known)
    matches = error.details["close_matches"]["lake.db.ordres"]
    assert len(matches) == errors.UnknownTableError.CLOSE_COUNT
    assert [m["similarity"] for m in matches] == sorted((m["similarity"] for m in matches),
                                                        reverse=True)
    assert not {"lake.db.customers", "lake.db.a"} & {m["table"] for m in matches}
    # one namespace compares the tables' own names: "lake.db." in common is no likeness
    assert errors.UnknownTableError.among(["lake.db.zzz"], known).details["close_matches"] == {
        "lake.db.zzz": []}
    assert error.details["table"] == "lake.db.ordres"  # one name, however often asked
    two = errors.UnknownTableError.among(["lake.db.b", "lake.db.a"], [])
    assert two.details == {"tables": ["lake.db.a", "lake.db.b"],
                           "close_matches": {"lake.db.a": [], "lake.db.b": []}}
