"""Names as the Iceberg REST specification has them (docs/contract.md#tables-and-names): namespaces
of several levels, and names with spaces, dots, backticks and unicode, through the catalog's
routes and pyiceberg's RestCatalog; a name that could leave the warehouse or break a URL is a
400 before it reaches storage."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, quote_plus

import httpx
import pyarrow as pa
import pytest
from pyiceberg.exceptions import (
    BadRequestError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    RESTError,
)

from metaservice.catalog.storage.warehouse import location_segment
from metaservice_names import TableName
from tests.metaservice.catalog.conftest import rest_catalog
from tests.metaservice.catalog.test_pyiceberg import SCHEMA
from tests.metaservice.catalog.test_rest_protocol import iceberg_error

NAMESPACES = "/iceberg/v1/namespaces"
STRANGE = ("sales dept", "eu.west", "`été`")  # three levels: a space, a dot, backticks, unicode


def url(*levels: str) -> str:
    """A namespace in a URL, as the specification writes it: levels joined by %1F."""
    return "%1F".join(quote(level, safe="") for level in levels)


def create(client: httpx.Client, *levels: str) -> None:
    answer = client.post(NAMESPACES, json={"namespace": list(levels)})
    assert answer.status_code == 200, answer.text
    assert answer.json()["namespace"] == list(levels)


def listed(client: httpx.Client, parent: tuple[str, ...] | None = None,
           page_size: int | None = None) -> list[list[str]]:
    params: dict[str, str | int] = {} if parent is None else {"parent": "\x1f".join(parent)}
    found: list[list[str]] = []
    while True:
        if page_size is not None:
            params = {**params, "pageSize": page_size,
                      "pageToken": params.get("pageToken", "")}
        answer = client.get(NAMESPACES, params=params)
        assert answer.status_code == 200, answer.text
        found += answer.json()["namespaces"]
        token = answer.json().get("next-page-token")
        if page_size is None or not token:
            return found
        params["pageToken"] = token


def test_config_names_the_separator_clients_must_use(client: httpx.Client) -> None:
    config = client.get("/iceberg/v1/config").json()
    assert config["overrides"]["namespace-separator"] == "%1F"


def test_namespaces_nest_under_parents_that_exist(client: httpx.Client) -> None:
    iceberg_error(client.post(NAMESPACES, json={"namespace": ["a", "b"]}), 404,
                  "NoSuchNamespaceException")  # no parent yet
    create(client, "a")
    create(client, "a", "b")
    create(client, "a", "b", "c")
    create(client, "a", "b2")
    create(client, "a.b")  # one level with a dot: not the namespace a, b
    assert listed(client) == [["a"], ["a.b"]]
    assert listed(client, ("a",)) == [["a", "b"], ["a", "b2"]]
    assert listed(client, ("a",), page_size=1) == [["a", "b"], ["a", "b2"]]
    assert listed(client, ("a", "b")) == [["a", "b", "c"]]
    assert listed(client, ("a.b",)) == []
    iceberg_error(client.get(NAMESPACES, params={"parent": "nowhere"}), 404,
                  "NoSuchNamespaceException")
    assert client.get(f"{NAMESPACES}/{url('a', 'b', 'c')}").json()["namespace"] == ["a", "b", "c"]
    assert client.head(f"{NAMESPACES}/{url('a', 'b')}").status_code == 204
    assert client.head(f"{NAMESPACES}/{url('a', 'x')}").status_code == 404
    iceberg_error(client.post(NAMESPACES, json={"namespace": ["a", "b"]}), 409,
                  "AlreadyExistsException")
    iceberg_error(client.delete(f"{NAMESPACES}/a"), 409, "NamespaceNotEmptyException")
    for levels in (("a", "b", "c"), ("a", "b"), ("a", "b2"), ("a",)):
        assert client.delete(f"{NAMESPACES}/{url(*levels)}").status_code == 204
    assert listed(client) == [["a.b"]]


def test_tables_with_any_name_through_pyiceberg(server, client: httpx.Client,  # type: ignore[no-untyped-def]
                                                warehouse: Path) -> None:
    catalog = rest_catalog(server.url)
    for depth in range(1, len(STRANGE) + 1):
        catalog.create_namespace(STRANGE[:depth])
    assert listed(client, STRANGE[:1]) == [list(STRANGE[:2])]
    # pyiceberg 0.12 percent-encodes the levels of ``parent`` before its HTTP library encodes
    # the query again: the server reads "sales%20dept", a namespace that does not exist. Java's
    # client encodes once, as the specification has it (docs/conformance.md).
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_namespaces(STRANGE[:1])
    identifier = (*STRANGE, "orders été.v2")
    table = catalog.create_table(identifier, SCHEMA)
    assert table.name() == identifier
    # The default location: the namespace's levels are directories inside the warehouse, a part
    # with a character FileIOs read apart (here a backtick) made safe, with a digest of it.
    assert table.location().endswith(
        f"/warehouse/sales dept/eu.west/{location_segment('`été`')}/orders été.v2")
    assert location_segment("`été`").startswith("_été_-")
    table.append(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
    assert catalog.load_table(identifier).scan().to_arrow().num_rows == 2
    assert catalog.list_tables(STRANGE) == [identifier]
    renamed = (*STRANGE[:2], "totals")
    catalog.rename_table(identifier, renamed)
    assert catalog.list_tables(STRANGE) == [] and catalog.list_tables(STRANGE[:2]) == [renamed]
    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace(STRANGE[:2])
    with pytest.raises(RESTError, match="NoSuchNamespaceException"):  # 404, as Polaris answers
        catalog.create_namespace(("nowhere", "x"))
    # The server's own name of the table, and its core routes, read it the same way.
    name = TableName.of("lake", STRANGE[:2], "totals")
    assert str(name) == "lake.`sales dept`.`eu.west`.totals"
    answer = client.get(f"/tables/{name.path}/barriers")
    assert answer.status_code == 200, answer.text


def test_names_that_urls_would_cut_keep_tables_apart(server,  # type: ignore[no-untyped-def]
                                                    warehouse: Path) -> None:
    """``#`` and ``?`` end a URL's path: two tables ``t#1`` and ``t#2`` would share the directory
    ``t`` if their names were their directories. Each gets one of its own, and a location naming
    them is refused."""
    catalog = rest_catalog(server.url)
    catalog.create_namespace("db")
    locations = set()
    for name in ("t#1", "t#2", "q?x", "50%", "a:b"):
        table = catalog.create_table(("db", name), SCHEMA)
        table.append(pa.table({"id": [1], "v": [name]}, schema=SCHEMA))
        assert catalog.load_table(("db", name)).scan().to_arrow()["v"].to_pylist() == [name]
        locations.add(table.location())
        assert not any(c in table.location().rsplit("/", 1)[-1] for c in "#?%:"), table.location()
    assert len(locations) == 5
    for location in (f"file://{warehouse}/t#1", f"{warehouse}/q?x"):
        with pytest.raises(BadRequestError, match="location_outside_warehouse"):
            catalog.create_table(("db", "explicit"), SCHEMA, location=location)


def test_names_are_case_sensitive_and_kept_as_written(client: httpx.Client) -> None:
    create(client, "Ünïcode")
    create(client, "ünïcode")
    assert listed(client) == [["Ünïcode"], ["ünïcode"]]
    for name in ("T", "t", "a b", "a`b"):
        created = client.post(f"{NAMESPACES}/{url('Ünïcode')}/tables", json={
            "name": name, "schema": {"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "type": "long", "required": False}]}})
        assert created.status_code == 200, created.text
    tables = client.get(f"{NAMESPACES}/{url('Ünïcode')}/tables").json()["identifiers"]
    assert sorted(t["name"] for t in tables) == sorted(["T", "t", "a b", "a`b"])
    iceberg_error(client.post(f"{NAMESPACES}/{url('Ünïcode')}/tables", json={
        "name": " t", "schema": {"type": "struct", "fields": []}}), 400, "BadRequestException")


def java_url(*levels: str) -> str:
    """A namespace in a URL as Iceberg's Java client writes it (``RESTUtil.encodeString``,
    ``java.net.URLEncoder``): a space is ``+``, a ``+`` is ``%2B``."""
    return "%1F".join(quote_plus(level, safe="") for level in levels)


def test_a_plus_in_a_name_segment_is_a_space_as_javas_client_writes_it(
        client: httpx.Client) -> None:
    create(client, "sales dept")
    create(client, "sales dept", "eu.west")
    create(client, "a+b")
    assert java_url("sales dept", "eu.west") == "sales+dept%1Feu.west"
    assert client.get(f"{NAMESPACES}/{java_url('sales dept', 'eu.west')}").status_code == 200
    assert client.head(f"{NAMESPACES}/{java_url('a+b')}").status_code == 204  # a+b: %2B
    created = client.post(f"{NAMESPACES}/{java_url('sales dept', 'eu.west')}/tables", json={
        "name": "commandes été", "schema": {"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False}]}})
    assert created.status_code == 200, created.text
    table = f"{NAMESPACES}/{java_url('sales dept', 'eu.west')}/tables/{java_url('commandes été')}"
    assert table.endswith("/tables/commandes+%C3%A9t%C3%A9")
    assert client.get(table).status_code == 200
    assert client.get(f"{NAMESPACES}/{url('sales dept', 'eu.west')}/tables/"
                      f"{url('commandes été')}").status_code == 200  # %20, as pyiceberg writes
    # Only the name segments: the table "commandes+été" does not exist (its '+' is a space).
    iceberg_error(client.get(f"{NAMESPACES}/{url('sales dept', 'eu.west')}/tables/"
                             "commandes+%C3%A9t%C3%A9x"), 404, "NoSuchTableException")
