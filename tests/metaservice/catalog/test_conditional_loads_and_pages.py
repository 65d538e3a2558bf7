"""What engines expect of a REST catalog besides tables: conditional loads (``ETag`` and
``If-None-Match``) and paginated listings (``pageToken``/``pageSize``), on both backends."""

from __future__ import annotations

import threading

import httpx
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

from tests.conftest import ServerThread
from tests.metaservice.catalog.conftest import rest_catalog

SCHEMA = pa.schema([pa.field("id", pa.int64())])
TABLES = "/iceberg/v1/namespaces/db/tables"


def test_a_load_answers_an_etag_and_if_none_match_gets_304_with_no_body(
        catalog: RestCatalog, client: httpx.Client) -> None:
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    first = client.get(f"{TABLES}/t")
    tag = first.headers["ETag"]
    assert tag.startswith('"') and first.status_code == 200
    again = client.get(f"{TABLES}/t", headers={"If-None-Match": tag})
    assert (again.status_code, again.content, again.headers["ETag"]) == (304, b"", tag)
    assert client.get(f"{TABLES}/t", headers={"If-None-Match": f'"x", W/{tag}'}
                      ).status_code == 304
    # snapshots=refs is another answer of the same file: another tag.
    refs = client.get(f"{TABLES}/t", params={"snapshots": "refs"})
    assert refs.headers["ETag"] != tag

    table.append(pa.table({"id": [1]}, schema=SCHEMA))
    changed = client.get(f"{TABLES}/t", headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["ETag"] != tag
    # A commit answers the new tag.
    commit = client.post(f"{TABLES}/t", json={"requirements": [], "updates": [
        {"action": "set-properties", "updates": {"k": "v"}}]})
    assert commit.status_code == 200
    assert client.get(f"{TABLES}/t", headers={"If-None-Match": commit.headers["ETag"]}
                      ).status_code == 304


def test_a_read_session_load_answers_the_etag_of_its_cut(server: ServerThread,
                                                         catalog: RestCatalog,
                                                         client: httpx.Client) -> None:
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA).append(
        pa.table({"id": [1]}, schema=SCHEMA), snapshot_properties={"metaservice.barrier": "10"})
    prefix = client.get("/iceberg/v1/config", params={"warehouse": "lake@strong"}).json()[
        "overrides"]["prefix"]
    first = client.get(f"/iceberg/v1/{prefix}/namespaces/db/tables/t")
    assert first.status_code == 200
    tag = first.headers["ETag"]
    again = client.get(f"/iceberg/v1/{prefix}/namespaces/db/tables/t",
                       headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b""
    # The head's answer is another file.
    assert client.get(f"{TABLES}/t", headers={"If-None-Match": tag}).status_code == 200
    catalog.load_table("db.t").append(pa.table({"id": [2]}, schema=SCHEMA),
                                      snapshot_properties={"metaservice.barrier": "20"})
    served = client.get(f"/iceberg/v1/{prefix}/namespaces/db/tables/t",
                        headers={"If-None-Match": tag})
    assert served.status_code in (200, 304)  # the same cut, in a file of the new head's
    assert served.headers["ETag"] != client.get(f"{TABLES}/t").headers["ETag"]


def test_listings_page_in_name_order_and_stay_stable_across_creates_and_drops(
        server: ServerThread, client: httpx.Client) -> None:
    catalog = rest_catalog(server.url)
    catalog.create_namespace("db")
    for i in range(0, 40, 2):
        catalog.create_table(f"db.t{i:02d}", schema=SCHEMA)
    everything = client.get(TABLES).json()
    assert everything["next-page-token"] is None and len(everything["identifiers"]) == 20

    seen: list[str] = []
    stop = threading.Event()

    def churn() -> None:  # odd names come and go while the listing pages
        i = 1
        while not stop.is_set():
            name = f"db.t{i:02d}"
            catalog.create_table(name, schema=SCHEMA)
            catalog.drop_table(name)
            i = (i + 2) % 40

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        token = ""
        while token is not None:
            page = client.get(TABLES, params={"pageToken": token, "pageSize": 3}).json()
            assert len(page["identifiers"]) <= 3
            seen += [i["name"] for i in page["identifiers"]]
            token = page["next-page-token"]
    finally:
        stop.set()
        worker.join()
    evens = [n for n in seen if int(n[1:]) % 2 == 0]
    assert evens == [f"t{i:02d}" for i in range(0, 40, 2)]  # each once, in order
    assert seen == sorted(set(seen))
    # pyiceberg pages with rest-page-size and gets every table.
    paged = rest_catalog(server.url, **{"rest-page-size": "7"})
    assert len(paged.list_tables("db")) == 20
    namespaces = client.get("/iceberg/v1/namespaces", params={"pageSize": 1}).json()
    assert namespaces["namespaces"] == [["db"]] and namespaces["next-page-token"] is None
    bad = client.get(TABLES, params={"pageToken": "%%%"})
    assert bad.status_code == 400, bad.text


def test_the_view_list_pages_too(catalog: RestCatalog, client: httpx.Client) -> None:
    from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

    catalog.create_namespace("db")
    for i in range(5):
        catalog.create_view(f"db.v{i}", SCHEMA, ViewVersion(
            version_id=1, schema_id=0, timestamp_ms=1, summary={},
            representations=[SQLViewRepresentation(type="sql", sql="select 1", dialect="spark")],
            default_namespace=["db"]))
    seen, token = [], ""
    while token is not None:
        page = client.get("/iceberg/v1/namespaces/db/views",
                          params={"pageToken": token, "pageSize": 2}).json()
        assert len(page["identifiers"]) <= 2
        seen += [v["name"] for v in page["identifiers"]]
        token = page["next-page-token"]
    assert seen == [f"v{i}" for i in range(5)]
