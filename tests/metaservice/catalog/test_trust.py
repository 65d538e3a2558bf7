"""The catalog trusts no caller (docs/contract.md#who-changes-a-table), tried from outside with the
tokens of two writers, an admin and a reader, through pyiceberg's ``RestCatalog`` and raw HTTP, on
both backends:

- a table a running job writes changes only through the token that registered the job (or an
  admin's maintenance);
- ``main`` only moves forward, however the commits are split;
- every location the server writes, reads or deletes lies inside the warehouse; no two tables
  share a location or an identity; a purge deletes only the table's own files;
- a drop ends a table: its history, leases and read-session entries go with it;
- refusals that a retry cannot change are not ``CommitFailedException``;
- read sessions are capped per principal, and a prefix naming none is 404 everywhere.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.exceptions import BadRequestError, ForbiddenError, RESTError
from pyiceberg.types import StringType

from metaservice.app import create_app
from metaservice.auth.policy import Role
from metaservice.auth.service import create_token
from metaservice.clock import ManualClock
from metaservice.db.session import Database
from metaservice.settings import Settings
from tests.conftest import ServerThread
from tests.metaservice.catalog.conftest import rest_catalog
from tests.metaservice.test_errors import assert_error

SCHEMA = pa.schema([pa.field("id", pa.int64())])
TABLES = "/iceberg/v1/namespaces/db/tables"
TOKENS = {"w1": Role.writer, "w2": Role.writer, "admin": Role.admin, "reader": Role.reader}


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids)}, schema=SCHEMA)


class Lake:
    """A secured server, and for each token a pyiceberg catalog and an HTTP client."""

    def __init__(self, url: str, tokens: dict[str, str], warehouse: Path) -> None:
        self.url, self.tokens, self.warehouse = url, tokens, warehouse
        self.http = {name: httpx.Client(base_url=url, timeout=30,
                                        headers={"Authorization": f"Bearer {token}"})
                     for name, token in tokens.items()}
        # A refusal must not be retried; a 409 would be (pyiceberg's default is 4 retries).
        self.catalogs = {name: rest_catalog(url, token=token) for name, token in tokens.items()}

    def close(self) -> None:
        for http in self.http.values():
            http.close()

    def commit(self, who: str, table: str, updates: list[dict[str, Any]],
               requirements: list[dict[str, Any]] | None = None) -> httpx.Response:
        return self.http[who].post(f"{TABLES}/{table}", json={
            "requirements": requirements or [], "updates": updates})

    def metadata(self, table: str) -> dict[str, Any]:
        answer = self.http["reader"].get(f"{TABLES}/{table}")
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    def head(self, table: str) -> int | None:
        return self.metadata(table)["metadata"].get("current-snapshot-id")

    def ids(self, table: str) -> list[int]:
        return sorted(self.catalogs["reader"].load_table(f"db.{table}").scan()
                      .to_arrow()["id"].to_pylist())

    def barriers(self, table: str) -> list[tuple[int, int]]:
        answer = self.http["reader"].get(f"/tables/lake/db/{table}/barriers")
        assert answer.status_code == 200, answer.text
        return [(b["barrier"], b["snapshot_id"]) for b in answer.json()["barriers"]]


@pytest.fixture
def lake_factory(database: Database, database_url: str, clock: ManualClock, warehouse: Path,
                 ) -> Iterator[Callable[..., Lake]]:
    started: list[tuple[ServerThread, Lake]] = []

    def start(**overrides: Any) -> Lake:
        settings = Settings(database_url=database_url, auth="required",
                            warehouse=str(warehouse), **overrides)
        app = create_app(settings, clock=clock, database=database)
        with database.transaction(write=True) as session:
            tokens = {name: create_token(session, name, role, clock.now_ms()).token
                      for name, role in TOKENS.items()}
        server = ServerThread(app).__enter__()
        lake = Lake(server.url, tokens, warehouse)
        started.append((server, lake))
        return lake

    yield start
    for server, lake in started:
        lake.close()
        server.__exit__(None, None, None)


@pytest.fixture
def lake(lake_factory: Callable[..., Lake]) -> Lake:
    return lake_factory()


def refused(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"].startswith(f"metaservice {code}:"), error
    assert error["type"] != "CommitFailedException"


def derived(lake: Lake) -> int:
    """``db.src`` (a root) → job ``etl`` of w1 → ``db.dst``, which holds the rows of barrier
    100 committed by the job; answers the job's snapshot."""
    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    w1.create_table("db.src", schema=SCHEMA).append(
        rows(1, 2), snapshot_properties={"metaservice.barrier": "100"})
    w1.create_table("db.dst", schema=SCHEMA)
    http = lake.http["w1"]
    for role, table in (("source", "src"), ("sink", "dst")):
        assert http.post(f"/register/{role}/etl/lake/db/{table}").status_code == 200
    start = http.post("/jobs/etl/start", json={"from": "latest"}).json()
    assert start["barrier"] == 100, start
    w1.load_table("db.dst").append(rows(1, 2), snapshot_properties={
        "metaservice.job": "etl", "metaservice.barrier": "100"})
    snapshot = lake.head("dst")
    assert snapshot is not None
    return snapshot


# -- 1. who changes a derived table --------------------------------------------------------------


def test_a_writer_that_does_not_own_the_running_job_changes_nothing_of_its_table(
        lake: Lake, tmp_path: Path) -> None:
    snapshot = derived(lake)
    before = lake.metadata("dst")
    parent = next(s for s in before["metadata"]["snapshots"] if s["snapshot-id"] == snapshot)
    older = {**parent, "snapshot-id": snapshot + 1, "parent-snapshot-id": None,
             "sequence-number": before["metadata"]["last-sequence-number"] + 1,
             "timestamp-ms": parent["timestamp-ms"] + 1,
             "summary": {**parent["summary"], "operation": "replace"}}
    attempts = {
        "set-properties": [{"action": "set-properties", "updates": {"owner": "w2"}}],
        "set-location": [{"action": "set-location",
                          "location": str(lake.warehouse / "db" / "elsewhere")}],
        "remove main": [{"action": "remove-snapshot-ref", "ref-name": "main"}],
        "replace onto an older parent": [
            {"action": "add-snapshot", "snapshot": older},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
             "snapshot-id": snapshot + 1}],
        "add a tag": [{"action": "set-snapshot-ref", "ref-name": "t", "type": "tag",
                       "snapshot-id": snapshot}],
    }
    for what, updates in attempts.items():
        response = lake.commit("w2", "dst", updates)
        refused(response, 403, "not_table_owner")
        assert response.json()["error"]["type"] == "ForbiddenException", what
    with pytest.raises(ForbiddenError, match="not_table_owner"):
        lake.catalogs["w2"].load_table("db.dst").update_schema().add_column(
            "x", StringType()).commit()
    with pytest.raises(ForbiddenError, match="not_table_owner"):  # an untagged append
        lake.catalogs["w2"].load_table("db.dst").append(rows(9))
    # Registering another file over it: w2 copies a table of its own and overwrites dst with it.
    own = lake.catalogs["w2"].create_table("db.mine", schema=SCHEMA)
    refused(lake.http["w2"].post("/iceberg/v1/namespaces/db/register", json={
        "name": "dst", "metadata-location": own.metadata_location, "overwrite": True}),
        403, "not_table_owner")

    assert lake.metadata("dst")["metadata-location"] == before["metadata-location"]
    assert lake.barriers("dst") == [(100, snapshot)]
    assert lake.ids("dst") == [1, 2]
    # The job's own token changes what it may: metadata that adds no snapshot.
    assert lake.commit("w1", "dst", attempts["set-properties"]).status_code == 200
    assert lake.catalogs["w1"].load_table("db.dst").properties["owner"] == "w2"


def test_an_admin_compacts_a_derived_table_but_does_not_rewrite_its_history(
        lake: Lake) -> None:
    """Compaction is a ``replace`` of the current head with the same rows; a replace of an
    older snapshot, or one that changes the row count, is no compaction."""
    snapshot = derived(lake)
    metadata = lake.metadata("dst")["metadata"]
    parent = next(s for s in metadata["snapshots"] if s["snapshot-id"] == snapshot)

    def replace(snapshot_id: int, summary: dict[str, str]) -> list[dict[str, Any]]:
        new = {**parent, "snapshot-id": snapshot_id, "parent-snapshot-id": snapshot,
               "sequence-number": metadata["last-sequence-number"] + 1,
               "timestamp-ms": parent["timestamp-ms"] + 1,
               "summary": {**parent["summary"], **summary, "operation": "replace"}}
        return [{"action": "add-snapshot", "snapshot": new},
                {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                 "snapshot-id": snapshot_id}]

    # Fewer rows: no compaction, so a second commit of the job's barrier 100.
    refused(lake.commit("admin", "dst", replace(snapshot + 7, {"total-records": "1"})),
            400, "barrier_regression")
    assert lake.commit("admin", "dst", replace(snapshot + 8, {})).status_code == 200
    assert lake.barriers("dst") == [(100, snapshot + 8)]


# -- 2. heads only move forward -------------------------------------------------------------------


def test_main_never_moves_back_however_the_commits_are_split(lake: Lake) -> None:
    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    table = w1.create_table("db.r", schema=SCHEMA)
    snapshots = []
    for i in range(3):
        table.append(rows(i), snapshot_properties={"metaservice.barrier": str(100 * (i + 1))})
        snapshots.append(lake.head("r"))
    set_main = [{"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                 "snapshot-id": snapshots[0]}]
    remove_main = [{"action": "remove-snapshot-ref", "ref-name": "main"}]

    refused(lake.commit("w2", "r", remove_main), 400, "head_not_forward")
    refused(lake.commit("w2", "r", set_main), 400, "rollback_plan_not_applied")
    refused(lake.commit("w2", "r", remove_main + set_main), 400, "rollback_plan_not_applied")
    # A new head that does not descend from the current one (an engine's REPLACE TABLE).
    metadata = lake.metadata("r")["metadata"]
    orphan = {**metadata["snapshots"][-1], "snapshot-id": snapshots[2] + 1,
              "parent-snapshot-id": None,
              "sequence-number": metadata["last-sequence-number"] + 1,
              "timestamp-ms": metadata["snapshots"][-1]["timestamp-ms"] + 1,
              "summary": {"operation": "append", "metaservice.barrier": "400"}}
    refused(lake.commit("w2", "r", [
        {"action": "add-snapshot", "snapshot": orphan},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
         "snapshot-id": snapshots[2] + 1}]), 400, "head_not_forward")

    assert lake.head("r") == snapshots[2]
    assert lake.ids("r") == [0, 1, 2]
    # Forward still works, and builds on the newest snapshot.
    w1.load_table("db.r").append(rows(3), snapshot_properties={"metaservice.barrier": "400"})
    assert lake.ids("r") == [0, 1, 2, 3]


# -- 3. and 4. files stay inside the warehouse ---------------------------------------------------


def test_the_server_writes_nowhere_but_the_warehouse(lake: Lake, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    w1 = lake.http["w1"]
    assert w1.post("/iceberg/v1/namespaces", json={"namespace": ["db"]}).status_code == 200
    schema = {"type": "struct", "schema-id": 0,
              "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    escape = f"{lake.warehouse}/db/../../outside"
    link = lake.warehouse / "db" / "link"
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, link)
    for location in (str(outside), escape, str(link / "t"), "foo://bucket/t", "", "relative/t",
                     f"file://{outside}"):
        refused(w1.post(TABLES, json={"name": "t", "schema": schema, "location": location})
                if location else
                w1.post(TABLES, json={"name": "t", "schema": schema,
                                      "properties": {"write.data.path": str(outside)}}),
                400, "location_outside_warehouse")
    refused(w1.post(TABLES, json={"name": "t", "schema": schema,
                                  "properties": {"write.metadata.path": str(outside)}}),
            400, "location_outside_warehouse")
    refused(w1.post("/iceberg/v1/namespaces", json={
        "namespace": ["ns"], "properties": {"location": str(outside)}}),
        400, "location_outside_warehouse")
    refused(w1.post("/iceberg/v1/namespaces/db/properties", json={
        "updates": {"location": str(outside)}}), 400, "location_outside_warehouse")

    assert w1.post(TABLES, json={"name": "t", "schema": schema}).status_code == 200
    for updates in ([{"action": "set-location", "location": str(outside)}],
                    [{"action": "set-location", "location": ""}],
                    [{"action": "set-properties",
                      "updates": {"write.metadata.path": str(outside)}}]):
        refused(lake.commit("w1", "t", updates), 400, "location_outside_warehouse")
    # No table's location lies inside another's.
    inner = {"name": "u", "schema": schema, "location": f"{lake.warehouse}/db/t/data/u"}
    refused(w1.post(TABLES, json=inner), 409, "table_already_registered")
    assert [p for p in outside.rglob("*")] == []
    assert not Path("/metadata").exists()


def test_register_reads_only_regular_metadata_files_inside_the_warehouse(
        lake: Lake, tmp_path: Path) -> None:
    lake.catalogs["w1"].create_namespace("db")
    register = "/iceberg/v1/namespaces/db/register"
    original = lake.catalogs["w1"].create_table("db.t", schema=SCHEMA)
    original.append(rows(1))
    outside = tmp_path / "outside.metadata.json"
    outside.write_bytes(Path(original.metadata_location).read_bytes())
    fifo = lake.warehouse / "db" / "fifo.metadata.json"
    os.mkfifo(fifo)
    w2 = lake.http["w2"]
    for path in ("/etc/passwd", str(outside), "/nonexistent/x.metadata.json"):
        refused(w2.post(register, json={"name": "x", "metadata-location": path}),
                400, "location_outside_warehouse")
    began = time.monotonic()
    response = w2.post(register, json={"name": "x", "metadata-location": str(fifo)})
    assert response.status_code == 400 and "not a regular file" in response.text, response.text
    assert time.monotonic() - began < 10
    # A copy of a table the catalog has (same table-uuid and location) is refused.
    refused(w2.post(register, json={"name": "copy",
                                    "metadata-location": original.metadata_location}),
            409, "table_already_registered")
    assert lake.http["reader"].head(f"{TABLES}/copy").status_code == 404


def test_a_purge_deletes_only_the_files_under_the_tables_location(lake: Lake) -> None:
    w1, w2 = lake.catalogs["w1"], lake.catalogs["w2"]
    w1.create_namespace("db")
    victim = w1.create_table("db.victim", schema=SCHEMA)
    victim.append(rows(1, 2))
    victim = w1.load_table("db.victim")
    victim_files = sorted(p for p in (lake.warehouse / "db" / "victim").rglob("*")
                          if p.is_file())
    # w2's table names the victim's manifest list, and a file that is no manifest list.
    evil = w2.create_table("db.evil", schema=SCHEMA)
    evil.append(rows(7))
    metadata = lake.metadata("evil")["metadata"]
    head = next(s for s in metadata["snapshots"]
                if s["snapshot-id"] == metadata["current-snapshot-id"])
    for offset, manifest_list in ((1, victim.current_snapshot().manifest_list),  # type: ignore[union-attr]
                                  (2, lake.metadata("evil")["metadata-location"])):
        snapshot = {**head, "snapshot-id": head["snapshot-id"] + offset,
                    "parent-snapshot-id": lake.head("evil"),
                    "sequence-number": lake.metadata("evil")["metadata"][
                        "last-sequence-number"] + 1,
                    "timestamp-ms": head["timestamp-ms"] + offset,
                    "manifest-list": manifest_list}
        assert lake.commit("w2", "evil", [
            {"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
             "snapshot-id": snapshot["snapshot-id"]}]).status_code == 200
    lake.catalogs["admin"].purge_table("db.evil")
    deadline = time.monotonic() + 20
    while [p for p in (lake.warehouse / "db" / "evil").rglob("*") if p.is_file()]:
        assert time.monotonic() < deadline, "the purge left the table's own files"
        time.sleep(0.05)
    assert sorted(p for p in (lake.warehouse / "db" / "victim").rglob("*")
                  if p.is_file()) == victim_files
    assert lake.ids("victim") == [1, 2]


def test_an_allowed_location_outside_the_warehouse_is_served(
        lake_factory: Callable[..., Lake], tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    lake = lake_factory(allowed_locations=f"{allowed}, s3://bucket/lake")
    lake.catalogs["w1"].create_namespace("db")
    table = lake.catalogs["w1"].create_table("db.t", schema=SCHEMA,
                                             location=str(allowed / "t"))
    table.append(rows(1))
    assert lake.ids("t") == [1]
    assert (allowed / "t" / "metadata").is_dir()


# -- 5. and 6. identity: copies, drops ------------------------------------------------------------


def test_a_drop_ends_the_tables_history_and_a_new_table_of_its_name_starts_afresh(
        lake: Lake) -> None:
    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    table = w1.create_table("db.r", schema=SCHEMA)
    for barrier in (100, 200):
        table.append(rows(barrier), snapshot_properties={"metaservice.barrier": str(barrier)})
    old = lake.head("r")
    lease = lake.http["reader"].post("/leases", json={
        "holder": "q", "ttl_seconds": 60, "snapshots": [{"table": "lake.db.r",
                                                         "snapshot_id": old}]})
    assert lease.status_code == 201, lease.text
    strong = rest_catalog(lake.url, token=lake.tokens["reader"], warehouse="lake@strong")
    assert strong.load_table("db.r").current_snapshot().snapshot_id == old  # type: ignore[union-attr]

    lake.catalogs["admin"].purge_table("db.r")
    reader = lake.http["reader"]
    assert reader.get("/version/strong/lake/db/r").status_code == 404
    assert reader.post("/versions", json={"consistency": "strong",
                                          "tables": ["lake.db.r"]}).status_code == 404
    assert reader.post("/leases", json={"holder": "q", "ttl_seconds": 60, "snapshots": [
        {"table": "lake.db.r", "snapshot_id": old}]}).status_code == 404

    fresh = w1.create_table("db.r", schema=SCHEMA)
    fresh.append(rows(1), snapshot_properties={"metaservice.barrier": "50"})
    version = reader.get("/version/strong/lake/db/r").json()
    assert (version["barrier"], version["snapshot_id"]) == (50, lake.head("r"))
    again = rest_catalog(lake.url, token=lake.tokens["reader"], warehouse="lake@strong")
    assert again.load_table("db.r").scan().to_arrow()["id"].to_pylist() == [1]


def test_a_drop_ends_the_leases_on_the_table(lake: Lake) -> None:
    """docs/contract.md#the-built-in-catalog: leases on a dropped table are 404 (not 200 with no
    snapshots); a lease that also holds another table's snapshot goes on holding that one."""
    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    for name in ("r", "s"):
        w1.create_table(f"db.{name}", schema=SCHEMA).append(
            rows(1), snapshot_properties={"metaservice.barrier": "100"})
    r, s = lake.head("r"), lake.head("s")
    reader = lake.http["reader"]

    def take(*held: tuple[str, int]) -> str:
        taken = reader.post("/leases", json={"holder": "q", "ttl_seconds": 60, "snapshots": [
            {"table": f"lake.db.{t}", "snapshot_id": snapshot} for t, snapshot in held]})
        assert taken.status_code == 201, taken.text
        return str(taken.json()["lease_id"])

    only_r, both = take(("r", r)), take(("r", r), ("s", s))
    assert lake.http["admin"].delete(f"{TABLES}/r").status_code == 204

    for answer in (reader.get(f"/leases/{only_r}"), reader.post(f"/leases/{only_r}/renew"),
                   lake.http["admin"].get(f"/leases/{only_r}"),
                   reader.delete(f"/leases/{only_r}")):
        assert_error(answer, 404, "unknown_lease")
    kept = reader.get(f"/leases/{both}")
    assert kept.status_code == 200, kept.text
    assert kept.json()["snapshots"] == [{"table": "lake.db.s", "snapshot_id": s}]
    assert [x["lease_id"] for x in reader.get("/leases").json()["leases"]] == [both]


def test_a_table_a_running_job_uses_is_not_dropped(lake: Lake) -> None:
    derived(lake)
    refused(lake.http["admin"].delete(f"{TABLES}/dst"), 400, "table_in_use")
    assert lake.http["w1"].post("/unregister/etl").status_code == 200
    assert lake.http["admin"].delete(f"{TABLES}/dst").status_code == 204


# -- 8. refusals say whether to retry -------------------------------------------------------------


def test_refusals_that_a_retry_cannot_change_are_not_commit_conflicts(lake: Lake) -> None:
    derived(lake)
    dst = lake.catalogs["w1"].load_table("db.dst")
    with pytest.raises(BadRequestError, match="table_has_writer"):
        dst.append(rows(5))  # the owner, without its barrier
    with pytest.raises(RESTError, match="barrier_in_future"):
        lake.catalogs["w2"].load_table("db.src").append(
            rows(5), snapshot_properties={"metaservice.barrier": str(2**62)})
    response = lake.http["w2"].post("/iceberg/v1/namespaces/db/tables/src", json={
        "requirements": [], "updates": [{"action": "set-properties", "updates": {"a": "b"}}]})
    assert response.status_code == 200  # a root table: any writer
    assert lake.barriers("src") == [(100, lake.head("src"))]


# -- 9. read sessions ------------------------------------------------------------------------------


def test_read_sessions_are_capped_per_principal_and_unknown_prefixes_are_404(
        lake_factory: Callable[..., Lake]) -> None:
    lake = lake_factory(max_read_sessions=3)
    reader = lake.http["reader"]
    config = "/iceberg/v1/config?warehouse=lake@strong"
    prefixes = [reader.get(config).json()["overrides"]["prefix"] for _ in range(3)]
    refused(reader.get(config), 429, "too_many_read_sessions")
    assert lake.http["w1"].get(config).status_code == 200  # another principal's own cap
    lease_id = prefixes[0].removeprefix("session-")
    assert reader.delete(f"/leases/{lease_id}").status_code == 204
    assert reader.get(config).status_code == 200

    lake.catalogs["w1"].create_namespace("db")
    for prefix, who in (("session-00000000-0000-0000-0000-000000000000", "reader"),
                        ("nonsense", "reader"), (prefixes[0], "reader"), (prefixes[1], "w1"),
                        ("view-" + prefixes[1].removeprefix("session-"), "w1")):
        http = lake.http[who]
        base = f"/iceberg/v1/{prefix}"
        for response in (http.get(f"{base}/namespaces"), http.get(f"{base}/namespaces/db"),
                         http.head(f"{base}/namespaces/db"),
                         http.get(f"{base}/namespaces/db/tables"),
                         http.head(f"{base}/namespaces/db/tables/t"),
                         http.get(f"{base}/namespaces/db/tables/t"),
                         http.post(f"{base}/namespaces/db/tables/t/metrics", json={}),
                         http.post(f"{base}/namespaces/db/tables/t", json={})):
            assert response.status_code == 404, (prefix, who, response.request.url)
    live = f"/iceberg/v1/{prefixes[1]}"
    assert reader.get(f"{live}/namespaces").status_code == 200
    assert reader.head(f"{live}/namespaces/db").status_code == 204


# -- races -----------------------------------------------------------------------------------------


def test_racing_creates_of_nested_locations_never_both_win(lake: Lake) -> None:
    """Each round, two creates race: one at a location, one inside it. At most one wins."""
    import threading

    lake.catalogs["w1"].create_namespace("db")
    schema = {"type": "struct", "schema-id": 0,
              "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    for round_ in range(6):
        outer = f"{lake.warehouse}/db/r{round_}"
        bodies = [{"name": f"outer{round_}", "schema": schema, "location": outer},
                  {"name": f"inner{round_}", "schema": schema, "location": f"{outer}/in"}]
        start = threading.Barrier(2)
        answers: list[int] = []

        def create(body: dict[str, Any], who: str, start: threading.Barrier,
                   answers: list[int]) -> None:
            start.wait()
            answers.append(lake.http[who].post(TABLES, json=body).status_code)

        threads = [threading.Thread(target=create, args=(body, who, start, answers))
                   for body, who in zip(bodies, ("w1", "w2"), strict=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(answers) == [200, 409], answers


def test_a_table_older_than_its_recorded_identity_gets_it_at_start(
        lake: Lake, database: Database, warehouse: Path) -> None:
    from sqlalchemy import delete, update

    from metaservice.catalog.site import CatalogSite
    from metaservice.catalog.storage.warehouse import Warehouse
    from metaservice.catalog.tables.claims import fill_identities
    from metaservice.db.models import CatalogLocationRow, IcebergTableRow

    lake.catalogs["w1"].create_namespace("db")
    table = lake.catalogs["w1"].create_table("db.t", schema=SCHEMA)
    with database.transaction(write=True) as session:  # as revision 0010 leaves older rows
        session.execute(update(IcebergTableRow).values(table_uuid=None))
        session.execute(delete(CatalogLocationRow))
    site = CatalogSite("lake", Warehouse(str(warehouse)))
    assert fill_identities(database, site, 0) == 1
    with database.transaction(write=False) as session:
        row = session.get(IcebergTableRow, ("db", "t"))
        assert row is not None and row.table_uuid == str(table.metadata.table_uuid)
    refused(lake.http["w2"].post("/iceberg/v1/namespaces/db/register", json={
        "name": "copy", "metadata-location": table.metadata_location}),
        409, "table_already_registered")
