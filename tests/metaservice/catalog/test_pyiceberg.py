"""pyiceberg's own REST client against the catalog, over loopback, on both backends
(docs/contract.md#the-built-in-catalog).

Each test checks what the Iceberg client sees and what MetaService then answers about barriers.
"""

from __future__ import annotations

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    BadRequestError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.expressions import EqualTo
from pyiceberg.types import StringType
from sqlalchemy import select

from metaservice.clock import ManualClock
from metaservice.db.models import SnapshotExpirationRow, TableRow
from metaservice.db.session import Database
from tests.metaservice.jobs.test_jobs import plan

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids), "v": [f"r{i}" for i in ids]}, schema=SCHEMA)


def barriers(client: httpx.Client, table: str) -> list[tuple[int, int, str | None]]:
    """(barrier, snapshot, writer job) of every completed barrier, newest first."""
    response = client.get(f"/tables/{table.replace('.', '/')}/barriers")
    if response.status_code == 404:
        return []
    return [(b["barrier"], b["snapshot_id"], b["writer_job"]) for b in response.json()["barriers"]]


def head(catalog: RestCatalog, identifier: str) -> int | None:
    snapshot = catalog.load_table(identifier).current_snapshot()
    return None if snapshot is None else snapshot.snapshot_id


def test_namespaces(catalog: RestCatalog) -> None:
    catalog.create_namespace("db", {"owner": "ana"})
    with pytest.raises(NamespaceAlreadyExistsError):
        catalog.create_namespace("db")
    assert catalog.list_namespaces() == [("db",)]
    assert catalog.load_namespace_properties("db") == {"owner": "ana"}
    assert catalog.namespace_exists("db") and not catalog.namespace_exists("other")
    summary = catalog.update_namespace_properties("db", removals={"owner", "gone"},
                                                  updates={"team": "x"})
    assert (summary.removed, summary.updated, summary.missing) == (["owner"], ["team"], ["gone"])
    assert catalog.load_namespace_properties("db") == {"team": "x"}
    catalog.create_table("db.t", schema=SCHEMA)
    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace("db")
    catalog.drop_table("db.t")
    catalog.drop_namespace("db")
    with pytest.raises(NoSuchNamespaceError):
        catalog.load_namespace_properties("db")
    with pytest.raises(NoSuchNamespaceError):
        catalog.create_table("db.t", schema=SCHEMA)


def test_tables_create_load_rename_drop_register(catalog: RestCatalog,
                                                 client: httpx.Client) -> None:
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA, properties={"k": "v"})
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table("db.t", schema=SCHEMA)
    assert table.properties["k"] == "v"
    table.append(rows(1, 2))
    assert catalog.list_tables("db") == [("db", "t")]
    assert catalog.table_exists("db.t") and not catalog.table_exists("db.u")
    location = catalog.load_table("db.t").metadata_location

    catalog.rename_table("db.t", "db.u")
    assert catalog.list_tables("db") == [("db", "u")]
    assert catalog.load_table("db.u").scan().to_arrow().num_rows == 2
    # MetaService's record of the table follows the rename.
    assert barriers(client, "lake.db.t") == []
    assert len(barriers(client, "lake.db.u")) == 1

    catalog.drop_table("db.u")
    with pytest.raises(NoSuchTableError):
        catalog.load_table("db.u")
    registered = catalog.register_table("db.back", location)
    assert registered.scan().to_arrow().num_rows == 2
    with pytest.raises(TableAlreadyExistsError):
        catalog.register_table("db.back", location)


def test_stage_create_then_commit_creates_the_table(catalog: RestCatalog) -> None:
    catalog.create_namespace("db")
    transaction = catalog.create_table_transaction("db.staged", schema=SCHEMA)
    assert not catalog.table_exists("db.staged")
    transaction.append(rows(1))
    transaction.commit_transaction()
    assert catalog.load_table("db.staged").scan().to_arrow().num_rows == 1


def test_load_with_only_referenced_snapshots(catalog: RestCatalog, client: httpx.Client) -> None:
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows(1))
    table.append(rows(2))
    every = client.get("/iceberg/v1/namespaces/db/tables/t").json()["metadata"]["snapshots"]
    refs = client.get("/iceberg/v1/namespaces/db/tables/t",
                      params={"snapshots": "refs"}).json()["metadata"]["snapshots"]
    assert len(every) == 2
    assert [s["snapshot-id"] for s in refs] == [head(catalog, "db.t")]


def test_appends_to_a_root_table_complete_barriers(catalog: RestCatalog, client: httpx.Client,
                                                   clock: ManualClock) -> None:
    catalog.create_namespace("db")
    table = catalog.create_table("db.r", schema=SCHEMA)
    table.append(rows(1))
    first = head(catalog, "db.r")
    assert barriers(client, "lake.db.r") == [(clock.now_ms(), first, None)]
    table.append(rows(2), snapshot_properties={"metaservice.barrier": str(clock.now_ms() + 50)})
    second = head(catalog, "db.r")
    assert barriers(client, "lake.db.r")[0] == (clock.now_ms() + 50, second, None)
    assert client.get("/version/strong/lake/db/r").json()["snapshot_id"] == second


def test_overwrite_delete_and_schema_evolution_of_a_root_table(
        catalog: RestCatalog, client: httpx.Client, clock: ManualClock) -> None:
    catalog.create_namespace("db")
    table = catalog.create_table("db.r", schema=SCHEMA)
    table.append(rows(1, 2, 3))
    clock.advance(10)
    table.overwrite(rows(4, 5))
    after_overwrite = head(catalog, "db.r")
    clock.advance(10)
    table = catalog.load_table("db.r")
    table.delete(EqualTo("id", 4))
    after_delete = head(catalog, "db.r")
    with table.update_schema() as update:
        update.add_column("note", StringType())
    table = catalog.load_table("db.r")
    assert [f.name for f in table.schema().fields] == ["id", "v", "note"]
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [5]
    # Each commit that moved main completed one barrier with main's new snapshot; the schema
    # change added no snapshot and completed nothing.
    recorded = barriers(client, "lake.db.r")
    assert [snapshot for _, snapshot, _ in recorded][:2] == [after_delete, after_overwrite]
    assert len(recorded) == 3


def test_a_jobs_barrier_commit_through_the_catalog(catalog: RestCatalog,
                                                   client: httpx.Client) -> None:
    catalog.create_namespace("db")
    source = catalog.create_table("db.src", schema=SCHEMA)
    sink = catalog.create_table("db.out", schema=SCHEMA)
    source.append(rows(1), snapshot_properties={"metaservice.barrier": "100"})
    plan(client, "etl", ["lake.db.src"], ["lake.db.out"])
    assert client.post("/jobs/etl/start", json={"from": "latest"}).json()["barrier"] == 100
    sink.append(rows(1), snapshot_properties={"metaservice.job": "etl",
                                              "metaservice.barrier": "100"})
    snapshot = head(catalog, "db.out")
    assert barriers(client, "lake.db.out") == [(100, snapshot, "etl")]
    job = client.get("/jobs/etl").json()
    assert job["last_committed_barrier"] == 100
    # POST /commit stays as the idempotent confirmation of the same commit.
    confirm = client.post("/commit/etl/lake/db/out", json={"barrier": 100, "snapshot_id": snapshot})
    assert confirm.status_code == 200, confirm.text
    assert client.get("/version/strong/lake/db/out").json()["snapshot_id"] == snapshot


def _refused(excinfo: pytest.ExceptionInfo[BadRequestError], code: str) -> None:
    assert f"metaservice {code}" in str(excinfo.value)


def test_refused_commits_leave_neither_pointer_nor_barrier(catalog: RestCatalog,
                                                           client: httpx.Client) -> None:
    catalog.create_namespace("db")
    once = {"commit.retry.num-retries": "1"}  # a refusal is not retried (400, not 409)
    source = catalog.create_table("db.src", schema=SCHEMA, properties=once)
    catalog.create_table("db.out", schema=SCHEMA, properties=once)
    source.append(rows(1), snapshot_properties={"metaservice.barrier": "100"})
    plan(client, "etl", ["lake.db.src"], ["lake.db.out"])
    client.post("/jobs/etl/start", json={"from": "latest"})
    before = catalog.load_table("db.out").metadata_location

    # Anyone but its running job writing the derived table.
    with pytest.raises(BadRequestError) as excinfo:
        catalog.load_table("db.out").append(rows(9))
    _refused(excinfo, "table_has_writer")
    # The job, at a barrier it was not handed.
    with pytest.raises(BadRequestError) as excinfo:
        catalog.load_table("db.out").append(
            rows(9), snapshot_properties={"metaservice.job": "etl", "metaservice.barrier": "99"})
    _refused(excinfo, "unknown_barrier")
    # A job that does not write the table.
    with pytest.raises(BadRequestError) as excinfo:
        catalog.load_table("db.src").append(
            rows(9), snapshot_properties={"metaservice.job": "etl", "metaservice.barrier": "100"})
    _refused(excinfo, "not_a_sink")

    assert catalog.load_table("db.out").metadata_location == before
    assert head(catalog, "db.out") is None
    assert barriers(client, "lake.db.out") == []
    assert [b for b, _, _ in barriers(client, "lake.db.src")] == [100]
    assert catalog.load_table("db.src").scan().to_arrow().num_rows == 1
    # A barrier that is not an integer is bad input.
    with pytest.raises(BadRequestError):
        catalog.load_table("db.src").append(rows(9), snapshot_properties={
            "metaservice.barrier": "soon"})


def test_expiration_removes_only_unprotected_snapshots(catalog: RestCatalog, client: httpx.Client,
                                                       clock: ManualClock,
                                                       database: Database) -> None:
    catalog.create_namespace("db")
    table = catalog.create_table("db.r", schema=SCHEMA)
    ids = []
    for i in range(3):
        clock.advance(10)
        table.append(rows(i))
        ids.append(head(catalog, "db.r"))
    lease = client.post("/leases", json={"holder": "q", "ttl_seconds": 60, "snapshots": [
        {"table": "lake.db.r", "snapshot_id": ids[1]}]})
    assert lease.status_code == 201, lease.text

    table = catalog.load_table("db.r")
    with pytest.raises(BadRequestError) as excinfo:
        table.maintenance.expire_snapshots().by_ids([ids[0], ids[1]]).commit()
    _refused(excinfo, "snapshot_protected")
    assert f"lease:{lease.json()['lease_id']}" in str(excinfo.value)
    assert len(catalog.load_table("db.r").snapshots()) == 3

    catalog.load_table("db.r").maintenance.expire_snapshots().by_id(ids[0]).commit()
    assert [s.snapshot_id for s in catalog.load_table("db.r").snapshots()] == ids[1:]
    with database.read_session() as session:
        table_id = session.scalar(select(TableRow.id).where(TableRow.name == "r"))
        states = {r.snapshot_id: r.state for r in session.scalars(
            select(SnapshotExpirationRow).where(SnapshotExpirationRow.table_id == table_id))}
    assert states == {ids[0]: "expired"}


def test_compaction_takes_over_the_barriers_of_the_snapshot_it_replaces(
        catalog: RestCatalog, client: httpx.Client) -> None:
    """A ``replace`` snapshot (same rows, files rewritten) is accepted on a derived table and
    completes the barriers its parent completed."""
    catalog.create_namespace("db")
    source = catalog.create_table("db.src", schema=SCHEMA)
    sink = catalog.create_table("db.out", schema=SCHEMA)
    source.append(rows(1), snapshot_properties={"metaservice.barrier": "100"})
    plan(client, "etl", ["lake.db.src"], ["lake.db.out"])
    client.post("/jobs/etl/start", json={"from": "latest"})
    sink.append(rows(1), snapshot_properties={"metaservice.job": "etl",
                                              "metaservice.barrier": "100"})
    metadata = client.get("/iceberg/v1/namespaces/db/tables/out").json()["metadata"]
    parent = next(s for s in metadata["snapshots"]
                  if s["snapshot-id"] == metadata["current-snapshot-id"])
    compacted = parent["snapshot-id"] + 1
    snapshot = {**parent, "snapshot-id": compacted, "parent-snapshot-id": parent["snapshot-id"],
                "sequence-number": metadata["last-sequence-number"] + 1,
                "timestamp-ms": parent["timestamp-ms"] + 1,
                "summary": {**parent["summary"], "operation": "replace"}}
    response = client.post("/iceberg/v1/namespaces/db/tables/out", json={
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main",
                          "snapshot-id": parent["snapshot-id"]}],
        "updates": [{"action": "add-snapshot", "snapshot": snapshot},
                    {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                     "snapshot-id": compacted}]})
    assert response.status_code == 200, response.text
    assert barriers(client, "lake.db.out") == [(100, compacted, "etl")]
    assert catalog.load_table("db.out").scan().to_arrow().num_rows == 1


def _move_main(client: httpx.Client, table: str, snapshot_id: int) -> httpx.Response:
    return client.post(f"/iceberg/v1/namespaces/db/tables/{table}", json={
        "requirements": [], "updates": [{"action": "set-snapshot-ref", "ref-name": "main",
                                         "type": "branch", "snapshot-id": snapshot_id}]})


def test_main_moves_back_only_under_an_applied_rollback_plan(catalog: RestCatalog,
                                                             client: httpx.Client) -> None:
    catalog.create_namespace("db")
    table = catalog.create_table("db.r", schema=SCHEMA)
    table.append(rows(1), snapshot_properties={"metaservice.barrier": "100"})
    first = head(catalog, "db.r")
    catalog.load_table("db.r").append(rows(2), snapshot_properties={"metaservice.barrier": "200"})
    second = head(catalog, "db.r")

    refused = _move_main(client, "r", first)  # type: ignore[arg-type]
    assert refused.status_code == 400, refused.text
    assert "metaservice rollback_plan_not_applied" in refused.json()["error"]["message"]
    assert head(catalog, "db.r") == second

    plan_id = client.post("/rollback-plans",
                          json={"table": "lake.db.r", "barrier": 100}).json()["id"]
    assert client.post(f"/rollback-plans/{plan_id}/apply").status_code == 200
    moved = _move_main(client, "r", first)  # type: ignore[arg-type]
    assert moved.status_code == 200, moved.text
    assert head(catalog, "db.r") == first
    assert client.post(f"/rollback-plans/{plan_id}/complete").status_code == 200
    assert catalog.load_table("db.r").scan().to_arrow()["id"].to_pylist() == [1]


def test_new_tables_default_to_zstd_parquet(catalog: RestCatalog) -> None:
    """As Iceberg's own catalogs do: an engine whose default codec is another (Spark's runtime
    writes gzip when the property is absent) writes zstd; a codec asked for is kept."""
    catalog.create_namespace("db")
    assert catalog.create_table("db.t", schema=SCHEMA).properties[
        "write.parquet.compression-codec"] == "zstd"
    assert catalog.create_table("db.s", schema=SCHEMA, properties={
        "write.parquet.compression-codec": "snappy"}).properties[
        "write.parquet.compression-codec"] == "snappy"


def test_a_table_created_where_a_renamed_one_lies_gets_a_place_of_its_own(
        catalog: RestCatalog) -> None:
    """Renamed, a table keeps its files where they are; a new table of its old name cannot share
    them (no two tables' files share a location), so its default location gets a suffix, and
    purging it leaves the renamed table whole (Iceberg's ``dropAfterRenameDoesntCorruptTable``)."""
    catalog.create_namespace("db")
    first = catalog.create_table("db.t", schema=SCHEMA)
    first.append(rows(1, 2))
    catalog.rename_table("db.t", "db.renamed")
    second = catalog.create_table("db.t", schema=SCHEMA)
    assert second.location() != first.location()
    assert second.location().startswith(first.location() + "-")
    second.append(rows(3))
    catalog.purge_table("db.t")
    assert sorted(catalog.load_table("db.renamed").scan().to_arrow()["id"].to_pylist()) == [1, 2]
