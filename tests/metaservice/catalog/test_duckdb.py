"""DuckDB's iceberg extension against the catalog, with pyiceberg on the same tables: each reads
the other's commits, and DuckDB's INSERT INTO a root table completes a barrier (SPEC §11)."""

from __future__ import annotations

import importlib
from pathlib import Path

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.conftest import ServerThread
from tests.metaservice.catalog.test_pyiceberg import SCHEMA, barriers, head, rows
from tests.metaservice.test_jobs import plan

duckdb = pytest.importorskip("duckdb")
EXTENSIONS = ("avro", "httpfs", "iceberg")


def _extension_file(name: str) -> Path:
    package = importlib.import_module(f"duckdb_extension_{name}")
    return next(Path(package.__path__[0]).rglob(f"{name}.duckdb_extension"))


@pytest.fixture
def duck(server: ServerThread, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A DuckDB connection with the catalog attached as ``lake``."""
    connection = duckdb.connect()
    connection.execute(f"SET extension_directory='{tmp_path / 'extensions'}'")
    for name in EXTENSIONS:
        connection.execute(f"INSTALL '{_extension_file(name)}'")
        connection.execute(f"LOAD {name}")
    connection.execute(f"ATTACH 'lake' AS lake (TYPE iceberg, ENDPOINT '{server.url}/iceberg', "
                       "AUTHORIZATION_TYPE 'none')")
    yield connection
    connection.close()


def test_duckdb_and_pyiceberg_read_each_others_commits(
        catalog: RestCatalog, client: httpx.Client, server: ServerThread, duck) -> None:  # type: ignore[no-untyped-def]
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA).append(rows(1, 2))
    assert duck.execute("SELECT id, v FROM lake.db.t ORDER BY id").fetchall() == [
        (1, "r1"), (2, "r2")]

    duck.execute("INSERT INTO lake.db.t VALUES (3, 'duck')")
    table = catalog.load_table("db.t")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    # DuckDB's INSERT INTO a root table completed a barrier with the snapshot it added.
    recorded = barriers(client, "lake.db.t")
    assert len(recorded) == 2 and recorded[0][1] == head(catalog, "db.t")

    table.append(rows(4))
    duck.execute("DETACH lake")  # a new attachment sees the newest metadata
    duck.execute(f"ATTACH 'lake' AS lake (TYPE iceberg, ENDPOINT '{server.url}/iceberg', "
                 "AUTHORIZATION_TYPE 'none')")
    assert [r[0] for r in duck.execute("SELECT id FROM lake.db.t ORDER BY id").fetchall()] == [
        1, 2, 3, 4]


def test_duckdb_cannot_write_a_derived_table(catalog: RestCatalog, client: httpx.Client,
                                             duck) -> None:  # type: ignore[no-untyped-def]
    catalog.create_namespace("db")
    catalog.create_table("db.src", schema=SCHEMA).append(
        rows(1), snapshot_properties={"metaservice.barrier": "100"})
    catalog.create_table("db.out", schema=SCHEMA)
    plan(client, "etl", ["lake.db.src"], ["lake.db.out"])
    assert client.post("/jobs/etl/start", json={"from": "latest"}).status_code == 200
    with pytest.raises(duckdb.Error, match="table_has_writer"):
        duck.execute("INSERT INTO lake.db.out VALUES (9, 'x')")
    assert head(catalog, "db.out") is None
    assert barriers(client, "lake.db.out") == []
