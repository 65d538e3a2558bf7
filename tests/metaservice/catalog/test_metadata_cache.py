"""A metadata file never changes once written: the catalog serialises its JSON once, keeps it
in memory within ``METASERVICE_METADATA_CACHE_BYTES``, and answers loads of a table's head and
of a read session's cut with those bytes, the same bytes it answered when it serialised each
load. Both backends, over the real server and pyiceberg's REST client."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField

from metaservice.catalog.storage.warehouse import MetadataJsonCache, Warehouse
from tests.metaservice.catalog.test_read_sessions import read_metadata_file

SCHEMA = pa.schema([pa.field("id", pa.int64())])
TABLES = "/iceberg/v1/namespaces/db/tables"


def _metadata(location: str, padding: int) -> TableMetadata:
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    return new_table_metadata(schema=schema, partition_spec=UNPARTITIONED_PARTITION_SPEC,
                              sort_order=UNSORTED_SORT_ORDER, location=location,
                              properties={"padding": "x" * padding})


def _json(metadata: TableMetadata) -> bytes:
    return metadata.model_dump_json().encode()


def cache_counts(client: httpx.Client) -> tuple[int, int]:
    """The cache's hits and misses, as ``/metrics`` tells them."""
    values = {}
    for line in client.get("/metrics").text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("metaservice_catalog_metadata_cache_"):
            values[name] = int(float(value))
    return (values["metaservice_catalog_metadata_cache_hits_total"],
            values["metaservice_catalog_metadata_cache_misses_total"])


def answer(location: str, metadata_json: bytes) -> bytes:
    """A table answer as the catalog serialised it at every load before it cached the JSON."""
    return (b'{"metadata-location":' + json.dumps(location).encode() + b',"metadata":'
            + metadata_json + b',"config":{}}')


def test_the_cache_keeps_at_most_its_bytes_and_evicts_the_least_recently_used() -> None:
    cache = MetadataJsonCache(limit=1000)
    cache.put("a", b"a" * 400)
    cache.put("b", b"b" * 400)
    assert cache.get("a") == b"a" * 400  # a is used more recently than b now
    cache.put("c", b"c" * 400)
    assert (len(cache), cache.size) == (2, 800)
    assert cache.get("b") is None
    assert cache.get("a") is not None and cache.get("c") is not None
    cache.put("huge", b"h" * 1001)  # larger than the whole cache: not kept, nothing evicted
    assert cache.get("huge") is None and (len(cache), cache.size) == (2, 800)
    cache.forget("a")
    assert (len(cache), cache.size) == (1, 400)
    assert (cache.hits, cache.misses) == (3, 2)
    assert MetadataJsonCache(limit=0).get("a") is None


def test_a_warehouse_serialises_each_metadata_file_once_within_its_bound(
        tmp_path: Path) -> None:
    root = f"{tmp_path}/warehouse"
    first, second = (_metadata(f"{root}/db/{name}", 100_000) for name in ("t", "u"))
    size = len(_json(first))
    warehouse = Warehouse(root, metadata_cache_bytes=size + size // 2)  # room for one file
    locations = [f"{root}/db/{name}/metadata/00000-{name}.metadata.json" for name in "tu"]
    warehouse.write(first, locations[0])
    warehouse.write(second, locations[1])  # the JSON written is cached; the first's goes
    cache = warehouse.metadata_cache
    assert len(cache) == 1 and cache.size <= cache.limit

    answered = warehouse.metadata_json(locations[1])  # a hit: what was written
    assert answered == _json(second) == Path(locations[1]).read_bytes()
    assert (cache.hits, cache.misses) == (1, 0)
    reread = warehouse.metadata_json(locations[0])  # a miss: serialised again, and kept
    assert reread == _json(first)
    assert warehouse.metadata_json(locations[0]) is reread  # then served as they are
    assert (cache.hits, cache.misses) == (2, 1)
    assert len(cache) == 1 and cache.size <= cache.limit

    # A cut file's JSON is cached once written, and goes with the file.
    cut = f"{root}/db/t/metadata/cut-0.metadata.json"
    content = _json(_metadata(f"{root}/db/t", 10))
    warehouse.write_shared(content, cut)
    assert Path(cut).read_bytes() == content
    assert warehouse.metadata_json(cut) is content
    warehouse.delete_cut_files([cut])
    assert not Path(cut).exists() and cache.get(cut) is None


def test_loads_of_the_head_answer_the_files_json_serialised_once(
        catalog: RestCatalog, client: httpx.Client) -> None:
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(pa.table({"id": [1, 2]}, schema=SCHEMA))  # its commit cached the new file
    hits, misses = cache_counts(client)
    first, second = client.get(f"{TABLES}/t"), client.get(f"{TABLES}/t")
    assert first.status_code == second.status_code == 200
    assert cache_counts(client) == (hits + 2, misses)
    location = first.json()["metadata-location"]
    assert first.content == second.content == answer(
        location, _json(read_metadata_file(location)))
    assert catalog.load_table("db.t").scan().to_arrow().num_rows == 2


def test_loads_in_a_read_session_answer_its_cut_files_json_from_memory(
        catalog: RestCatalog, client: httpx.Client) -> None:
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA).append(
        pa.table({"id": [1]}, schema=SCHEMA), snapshot_properties={"metaservice.barrier": "10"})
    prefix = client.get("/iceberg/v1/config", params={"warehouse": "lake@strong"}).json()[
        "overrides"]["prefix"]
    first = client.get(f"/iceberg/v1/{prefix}/namespaces/db/tables/t")  # fixes the cut
    assert first.status_code == 200, first.text
    hits, misses = cache_counts(client)
    second = client.get(f"/iceberg/v1/{prefix}/namespaces/db/tables/t")
    assert cache_counts(client) == (hits + 1, misses)
    location = first.json()["metadata-location"]
    assert "/cut-" in location
    # The answer's metadata is the cut file's content, byte for byte, at every load.
    cut_file = Path(location.removeprefix("file://")).read_bytes()
    assert first.content == second.content == answer(location, cut_file)
    assert cut_file == _json(read_metadata_file(location))
    assert second.json()["metadata"]["properties"]["metaservice.barrier"] == "10"
