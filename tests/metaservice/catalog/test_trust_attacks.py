"""Subtler attacks on the catalog's trust rules (docs/contract.md#files-stay-inside-the-warehouse,
docs/contract.md#consistent-warehouses) than those of ``test_trust.py``: planting the table a
running job will write, freeing a location a table's files still use, symlinks swapped in after a
table claimed its place, renames racing drops and commits, compressed metadata that inflates past
the cap, reports through the core API of a catalog table, NUL bytes on every route. Tried with the
tokens of two writers (w1 owns the job, w2 is the attacker), an admin and a reader, on both
backends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from metaservice.catalog.tables.purges import PurgeWorker
from tests.metaservice.catalog import test_trust as trust
from tests.metaservice.catalog.test_rest_protocol import iceberg_error
from tests.metaservice.catalog.test_trust import SCHEMA, TABLES, Lake, refused, rows
from tests.metaservice.test_errors import assert_error

# The secured server with tokens w1, w2 (writers), admin and reader, on both backends.
lake_factory = trust.lake_factory
lake = trust.lake


def lost_race(response: httpx.Response) -> None:
    """The one 409 of the catalog (docs/contract.md#errors-say-whether-to-retry): a lost
    compare-and-swap, ``CommitFailedException``, which clients refresh and retry."""
    iceberg_error(response, 409, "CommitFailedException")


class Purges:
    """Counts the purges the server has finished: a purge runs after its drop's response (a
    background task), so a test waits for it to end before it looks at the files."""

    def __init__(self) -> None:
        self.finished = 0
        self._changed = threading.Condition()

    def done(self) -> None:
        with self._changed:
            self.finished += 1
            self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = 30) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self.finished >= count, timeout), (
                f"{self.finished} of {count} purges finished in {timeout} s")


@pytest.fixture
def purges(monkeypatch: pytest.MonkeyPatch) -> Iterator[Purges]:
    counted = Purges()
    purge = PurgeWorker.purge

    def purge_and_count(self: PurgeWorker, *args: Any, **kwargs: Any) -> bool:
        try:
            return purge(self, *args, **kwargs)
        finally:
            counted.done()

    monkeypatch.setattr(PurgeWorker, "purge", purge_and_count)
    yield counted


SCHEMA_JSON = {"type": "struct", "schema-id": 0,
               "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


def job_without_sink_table(lake: Lake) -> None:
    """w1's running job ``etl`` reads ``db.src`` and writes ``db.dst``, which the catalog does
    not hold yet (the job creates it at its first commit, as Spark's CREATE TABLE IF NOT
    EXISTS does)."""
    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    w1.create_table("db.src", schema=SCHEMA).append(
        rows(1, 2), snapshot_properties={"metaservice.barrier": "100"})
    http = lake.http["w1"]
    for role, table in (("source", "src"), ("sink", "dst")):
        answer = http.post(f"/register/{role}/etl/lake/db/{table}")
        assert answer.status_code == 200, answer.text
    start = http.post("/jobs/etl/start", json={"from": "latest"}).json()
    assert start["barrier"] == 100, start


def forged_copy(lake: Lake, table: str, where: str) -> str:
    """A metadata file w2 writes itself (writers write files to the warehouse): ``table``'s
    snapshots under a new table-uuid and location ``<warehouse>/db/<where>``."""
    import json
    import uuid

    metadata = lake.metadata(table)["metadata"]
    metadata["table-uuid"] = str(uuid.uuid4())
    metadata["location"] = str(lake.warehouse / "db" / where)
    path = lake.warehouse / "db" / where / "metadata" / "00000-forged.metadata.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metadata))
    return str(path)


@pytest.mark.parametrize("how", ["create", "register", "rename"])
def test_a_writer_plants_no_table_under_the_name_a_running_job_writes(
        lake: Lake, how: str) -> None:
    """``db.dst`` is the sink of w1's running job; the catalog has no table of that name yet.
    w2 may not create it, register a file as it, or rename a table onto it
    (docs/contract.md#who-changes-a-table: a register or rename over a derived table is 403
    ``not_table_owner``): the job's next barrier would hold w2's rows, or its files would land where
    w2 chose."""
    job_without_sink_table(lake)
    w2 = lake.http["w2"]
    lake.catalogs["w2"].create_table("db.evil", schema=SCHEMA).append(rows(666))
    if how == "create":
        response = w2.post(TABLES, json={
            "name": "dst", "schema": SCHEMA_JSON,
            "properties": {"write.data.path": str(lake.warehouse / "db" / "evil" / "data")}})
    elif how == "register":
        response = w2.post("/iceberg/v1/namespaces/db/register", json={
            "name": "dst", "metadata-location": forged_copy(lake, "evil", "forged")})
    else:
        staged = w2.post("/iceberg/v1/namespaces/db/register", json={
            "name": "staged", "metadata-location": forged_copy(lake, "evil", "forged")})
        assert staged.status_code == 200, staged.text
        response = w2.post("/iceberg/v1/tables/rename", json={
            "source": {"namespace": ["db"], "name": "staged"},
            "destination": {"namespace": ["db"], "name": "dst"}})
    if response.status_code < 300 and how != "create":
        # What the job then builds on: its barrier 100 holds w2's row 666.
        lake.catalogs["w1"].load_table("db.dst").append(rows(1, 2), snapshot_properties={
            "metaservice.job": "etl", "metaservice.barrier": "100"})
        assert lake.ids("dst") == [1, 2], "the job's barrier holds rows w2 planted"
    refused(response, 403, "not_table_owner")


def test_a_purge_spares_the_files_a_moved_table_still_names(lake: Lake, purges: Purges) -> None:
    """w2 moves w1's root table ``victim`` (any writer may: it is a root table), creates
    ``evil`` at victim's old location, where victim's snapshots still name their files, points
    a snapshot of evil at victim's manifest list, and an admin purges evil: the purge deletes
    files another table names (docs/contract.md#who-changes-a-table: no table's location lies inside
    another's; docs/contract.md#files-stay-inside-the-warehouse: a purge deletes only the table's
    own files)."""

    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    victim = w1.create_table("db.victim", schema=SCHEMA)
    victim.append(rows(1, 2))
    victim = w1.load_table("db.victim")
    manifest_list = victim.current_snapshot().manifest_list  # type: ignore[union-attr]
    old_location = str(lake.warehouse / "db" / "victim")
    moved = lake.commit("w2", "victim", [
        {"action": "set-location", "location": str(lake.warehouse / "db" / "moved")}])
    created = None
    if moved.status_code == 200:
        created = lake.http["w2"].post(TABLES, json={"name": "evil", "schema": SCHEMA_JSON,
                                                     "location": old_location})
    if created is not None and created.status_code == 200:
        head = victim.metadata.snapshot_by_id(victim.metadata.current_snapshot_id)
        assert head is not None
        snapshot = {"snapshot-id": 4242, "sequence-number": 1,
                    "timestamp-ms": head.timestamp_ms + 1, "manifest-list": manifest_list,
                    "summary": {"operation": "append"}, "schema-id": 0}
        assert lake.commit("w2", "evil", [
            {"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
             "snapshot-id": 4242}]).status_code == 200
        lake.catalogs["admin"].purge_table("db.evil")
        purges.wait_for(1)
    assert Path(manifest_list).exists(), "the purge of evil deleted victim's manifest list"
    assert lake.ids("victim") == [1, 2]


def _swap_names_while(lake: Lake) -> None:
    """w2 renames ``a`` to ``a2`` and ``b`` to ``a``: the table now named ``a`` is another."""
    w2 = lake.http["w2"]
    for source, target in (("a", "a2"), ("b", "a")):
        answer = w2.post("/iceberg/v1/tables/rename", json={
            "source": {"namespace": ["db"], "name": source},
            "destination": {"namespace": ["db"], "name": target}})
        assert answer.status_code == 204, answer.text


def _two_tables_at_one_version(lake: Lake) -> None:
    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    w1.create_table("db.a", schema=SCHEMA).append(rows(1))
    w1.create_table("db.b", schema=SCHEMA).append(rows(2))


def test_a_commit_staged_on_a_table_never_lands_on_another_of_its_name(
        lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pointer swap compares the version only, and a rename keeps versions: a commit
    staged on ``a`` while ``a`` and ``b`` swap names replaces ``b``'s pointer with a file of
    ``a`` (ABA). ``b``'s rows are lost and two pointers share one table-uuid
    (docs/contract.md#commits-through-the-catalog: never lose an acknowledged commit; a table's
    identity is its table-uuid)."""
    from metaservice.catalog.tables import commits

    _two_tables_at_one_version(lake)
    original = commits._stage
    fired: list[bool] = []

    def stage_then_rename(catalog, name, pointer, request):  # type: ignore[no-untyped-def]
        staged = original(catalog, name, pointer, request)
        if name.table == "a" and not fired:
            fired.append(True)
            _swap_names_while(lake)
        return staged

    monkeypatch.setattr(commits, "_stage", stage_then_rename)
    response = lake.commit("w1", "a", [{"action": "set-properties", "updates": {"k": "v"}}])
    uuids = {t: lake.metadata(t)["metadata"]["table-uuid"] for t in ("a", "a2")}
    assert uuids["a"] != uuids["a2"], "two tables share one table-uuid"
    assert lake.ids("a") == [2], "b's rows are gone"
    lost_race(response)


def test_a_drop_and_purge_of_a_table_never_hits_another_of_its_name(
        lake: Lake, monkeypatch: pytest.MonkeyPatch, purges: Purges) -> None:
    """A drop reads the pointer, then deletes it by version in a second transaction: a rename
    in between makes it drop ``b`` (now named ``a``) and purge the files of ``a`` (now ``a2``,
    alive)."""

    from metaservice.catalog.tables import service as tables

    _two_tables_at_one_version(lake)
    original = tables._pointer
    fired: list[bool] = []

    def read_then_rename(session, namespace, table):  # type: ignore[no-untyped-def]
        pointer = original(session, namespace, table)
        if table == "a" and not fired:
            fired.append(True)
            pointer = type(pointer)(**{c: getattr(pointer, c) for c in (
                "namespace", "name", "metadata_location", "version", "created_at",
                "updated_at", "table_uuid")})  # detached copy of what was read
            _swap_names_while(lake)
        return pointer

    monkeypatch.setattr(tables, "_pointer", read_then_rename)
    response = lake.http["admin"].delete(f"{TABLES}/a", params={"purgeRequested": "true"})
    monkeypatch.setattr(tables, "_pointer", original)
    purges.wait_for(1 if response.status_code == 204 else 0)
    listed = sorted(t["name"] for t in lake.http["reader"].get(TABLES).json()["identifiers"])
    assert Path(lake.metadata("a2")["metadata-location"]).exists(), (
        f"the purge deleted the files of the live table a2 (tables now: {listed})")
    assert lake.ids("a2") == [1]
    if response.status_code == 204:
        assert listed == ["a"], listed
    else:
        lost_race(response)


def test_the_size_cap_bounds_what_a_compressed_metadata_file_inflates_to(
        lake_factory: Any) -> None:
    """The cap is on the bytes read, not on what a ``.gz.metadata.json`` inflates to: a file of
    about 60 kB under a 200 kB cap inflates to 60 MB (at the default cap of 64 MiB, ~64 GB:
    one register by a writer exhausts the server's memory)
    (docs/contract.md#no-io-under-a-write-lock: a metadata file is read only if it is under the size
    cap)."""
    import gzip
    import json
    import uuid

    lake = lake_factory(max_metadata_bytes=200_000)
    lake.catalogs["w2"].create_namespace("db")
    lake.catalogs["w2"].create_table("db.t", schema=SCHEMA)
    metadata = lake.metadata("t")["metadata"]
    metadata["table-uuid"] = str(uuid.uuid4())
    metadata["location"] = str(lake.warehouse / "db" / "bomb")
    path = lake.warehouse / "db" / "bomb" / "metadata" / "00000-x.gz.metadata.json"
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wb", compresslevel=9) as out:
        chunk = b" " * (1 << 20)
        for _ in range(60):
            out.write(chunk)
        out.write(json.dumps(metadata).encode())
    assert path.stat().st_size < 200_000
    response = lake.http["w2"].post("/iceberg/v1/namespaces/db/register", json={
        "name": "bomb", "metadata-location": str(path)})
    message = iceberg_error(response, 400, "BadRequestException")
    assert message.startswith("metaservice metadata_too_large: "), message
    assert "inflates to larger than 200000 bytes" in message, message


def test_a_writer_does_not_rewrite_the_barriers_of_a_root_table_by_calling_it_compaction(
        lake: Lake) -> None:
    """docs/contract.md#commits-through-the-catalog: a ``replace`` takes over the barriers of the
    snapshot it replaces only when committed by the job's principal or an admin. On a root table any
    writer's ``replace`` whose summary claims the parent's ``total-records`` moves barrier 100 to a
    snapshot of other rows: a reproducible read at barrier 100 now answers w2's rows."""
    w1, w2 = lake.catalogs["w1"], lake.catalogs["w2"]
    w1.create_namespace("db")
    w1.create_table("db.r", schema=SCHEMA).append(
        rows(1, 2), snapshot_properties={"metaservice.barrier": "100"})
    original = lake.head("r")
    assert original is not None
    assert lake.barriers("r") == [(100, original)]
    mine = w2.create_table("db.mine", schema=SCHEMA)
    mine.append(rows(7, 8))
    other_rows = w2.load_table("db.mine").current_snapshot().manifest_list  # type: ignore[union-attr]
    metadata = lake.metadata("r")["metadata"]
    parent = metadata["snapshots"][-1]
    forged = {**parent, "snapshot-id": original + 1, "parent-snapshot-id": original,
              "sequence-number": metadata["last-sequence-number"] + 1,
              "timestamp-ms": parent["timestamp-ms"] + 1, "manifest-list": other_rows,
              "summary": {**parent["summary"], "operation": "replace"}}
    forged["summary"].pop("metaservice.barrier", None)
    response = lake.commit("w2", "r", [
        {"action": "add-snapshot", "snapshot": forged},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
         "snapshot-id": original + 1}])
    at_100 = rest_catalog_at(lake, 100).load_table("db.r").scan().to_arrow()["id"].to_pylist()
    assert sorted(at_100) == [1, 2], f"barrier 100 now reads w2's rows ({response.status_code})"
    assert (100, original) in lake.barriers("r")


def rest_catalog_at(lake: Lake, barrier: int) -> Any:
    from tests.metaservice.catalog.conftest import rest_catalog

    return rest_catalog(lake.url, token=lake.tokens["reader"], warehouse=f"lake@barrier={barrier}")


def test_a_scheme_without_slashes_is_confined_as_the_file_it_names(
        lake: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``file:/x`` (no ``//``) is compared as the relative path ``./file:/x`` but pyiceberg's
    FileIO opens ``/x``. With the server's working directory inside the warehouse (an operator
    running ``METASERVICE_WAREHOUSE=. metaservice serve``), the server writes outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    lake.warehouse.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(lake.warehouse)
    w2 = lake.http["w2"]
    assert w2.post("/iceberg/v1/namespaces", json={"namespace": ["db"]}).status_code == 200
    assert w2.post(TABLES, json={"name": "t", "schema": SCHEMA_JSON}).status_code == 200
    response = lake.commit("w2", "t", [{"action": "set-location",
                                        "location": f"file:{outside}/t"}])
    written = [str(p) for p in outside.rglob("*")]
    assert written == [], f"the server wrote outside the warehouse: {written}"
    refused(response, 400, "location_outside_warehouse")


def _create_change(name: str, location: str, table_uuid: str | None = None) -> dict[str, Any]:
    """A transaction's change that creates ``db.<name>`` (``assert-create``), as a client
    commits a stage-create."""
    updates: list[dict[str, Any]] = []
    if table_uuid is not None:
        updates.append({"action": "assign-uuid", "uuid": table_uuid})
    updates += [
        {"action": "upgrade-format-version", "format-version": 2},
        {"action": "add-schema", "schema": SCHEMA_JSON},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": {"spec-id": 0, "fields": []}},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": location},
    ]
    return {"identifier": {"namespace": ["db"], "name": name},
            "requirements": [{"type": "assert-create"}], "updates": updates}


def test_one_transaction_creates_no_two_tables_at_nested_locations_or_one_uuid(
        lake: Lake) -> None:
    """Each created table's location and uuid are checked against the database only, not
    against the other tables of the same transaction: two tables at nested locations are both
    created (docs/contract.md#files-stay-inside-the-warehouse: no table's location lies inside
    another's), and two with one uuid are a 500 (the unique index)."""
    import uuid

    w2 = lake.http["w2"]
    assert w2.post("/iceberg/v1/namespaces", json={"namespace": ["db"]}).status_code == 200
    outer = str(lake.warehouse / "db" / "outer")
    nested = w2.post("/iceberg/v1/transactions/commit", json={"table-changes": [
        _create_change("outer", outer), _create_change("inner", f"{outer}/in")]})
    one_uuid = str(uuid.uuid4())
    twins = w2.post("/iceberg/v1/transactions/commit", json={"table-changes": [
        _create_change("x1", str(lake.warehouse / "db" / "x1"), one_uuid),
        _create_change("x2", str(lake.warehouse / "db" / "x2"), one_uuid)]})
    refused(twins, 400, "table_already_registered")
    refused(nested, 400, "table_already_registered")


def test_a_commit_writes_no_metadata_file_over_the_size_cap(lake_factory: Any) -> None:
    """The cap is enforced on reads only: a writer's ``set-properties`` of a large value is
    committed, and every server that has not cached the file (another process, a restart)
    answers 500 for the table ever after (docs/contract.md#errors-say-whether-to-retry: bad input is
    a 4xx; a table stays readable)."""
    from metaservice.catalog.storage.warehouse import Warehouse

    lake = lake_factory(max_metadata_bytes=50_000)
    lake.catalogs["w1"].create_namespace("db")
    lake.catalogs["w1"].create_table("db.t", schema=SCHEMA).append(rows(1))
    response = lake.commit("w2", "t", [{"action": "set-properties",
                                        "updates": {"big": "x" * 60_000}}])
    import gc

    for warehouse in [o for o in gc.get_objects() if isinstance(o, Warehouse)]:
        warehouse._files = type(warehouse._files)()  # as a restarted server, or another one
    load = lake.http["reader"].get(f"{TABLES}/t")
    assert load.status_code < 500, load.text
    message = iceberg_error(response, 400, "BadRequestException")
    assert message.startswith("metaservice metadata_too_large: "), message
    assert "more than the catalog reads (50000, METASERVICE_MAX_METADATA_BYTES)" in message, (
        message)


def test_a_purge_judges_ownership_by_the_location_recorded_not_by_a_symlink_made_later(
        lake: Lake, purges: Purges) -> None:
    """A writer writes files in the warehouse (its data files). w2 turns its own table's
    directory into a symlink to w1's table after creating it; the purge resolves the table's
    location again, finds w1's files "inside" it and deletes them
    (docs/contract.md#files-stay-inside-the-warehouse: a purge deletes only files under the table's
    own location; no table's location lies inside another's)."""
    import os
    import shutil

    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    victim = w1.create_table("db.victim", schema=SCHEMA)
    victim.append(rows(1, 2))
    victim = w1.load_table("db.victim")
    manifest_list = Path(victim.current_snapshot().manifest_list)  # type: ignore[union-attr]
    lake.catalogs["w2"].create_table("db.evil", schema=SCHEMA)
    evil_dir = lake.warehouse / "db" / "evil"
    victim_dir = lake.warehouse / "db" / "victim"
    for path in (evil_dir / "metadata").iterdir():  # keep evil's own metadata reachable
        shutil.move(str(path), victim_dir / "metadata" / path.name)
    shutil.rmtree(evil_dir)
    os.symlink(victim_dir, evil_dir)
    metadata = lake.metadata("evil")["metadata"]
    snapshot = {"snapshot-id": 4242, "sequence-number": 1, "timestamp-ms": 1_700_000_000_000,
                "manifest-list": str(evil_dir / "metadata" / manifest_list.name),
                "summary": {"operation": "append"}, "schema-id": metadata["current-schema-id"]}
    assert lake.commit("w2", "evil", [
        {"action": "add-snapshot", "snapshot": snapshot},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
         "snapshot-id": 4242}]).status_code == 200
    lake.catalogs["admin"].purge_table("db.evil")
    purges.wait_for(1)
    assert manifest_list.exists(), "the purge of evil deleted victim's manifest list"
    assert lake.ids("victim") == [1, 2]


def test_a_commit_refused_for_an_overlapping_location_is_not_retryable(lake: Lake) -> None:
    """A commit's ``set-location`` into another table's location is refused with 409
    ``AlreadyExistsException``; every client maps a commit's 409 to ``CommitFailedException``
    and retries it (pyiceberg: four times). Only a lost compare-and-swap may be a 409 on the
    commit route (docs/contract.md#trust)."""
    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    w1.create_table("db.a", schema=SCHEMA)
    w1.create_table("db.b", schema=SCHEMA)
    response = lake.commit("w2", "b", [
        {"action": "set-location", "location": str(lake.warehouse / "db" / "a" / "b")}])
    refused(response, 400, "table_already_registered")


def test_main_does_not_become_a_tag(lake: Lake) -> None:
    """Any writer turns ``main`` of a root table into a tag at the same snapshot: nothing moves,
    so nothing is checked, and no engine can append to the table any more ("main is a tag")
    (docs/contract.md#heads-only-move-forward: main cannot be removed)."""
    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    w1.create_table("db.r", schema=SCHEMA).append(
        rows(1), snapshot_properties={"metaservice.barrier": "100"})
    response = lake.commit("w2", "r", [{"action": "set-snapshot-ref", "ref-name": "main",
                                        "type": "tag", "snapshot-id": lake.head("r")}])
    assert lake.metadata("r")["metadata"]["refs"]["main"]["type"] == "branch"
    refused(response, 400, "head_not_forward")


def test_a_nul_byte_in_a_path_is_a_4xx_on_every_backend(lake: Lake) -> None:
    """docs/contract.md#errors-say-whether-to-retry: every malformed request is a 4xx on both
    backends, including NUL bytes. On PostgreSQL each of these is a 500 (the byte reaches the
    database before any validation)."""
    lake.catalogs["w1"].create_namespace("db")
    catalog_answers = {
        "load table": lake.http["reader"].get(f"{TABLES}/a%00b"),
        "session prefix": lake.http["reader"].get("/iceberg/v1/session-a%00b/namespaces"),
        "legacy prefix": lake.http["reader"].get("/iceberg/v1/view-a%00b/namespaces"),
    }
    core_answers = {
        "lease": lake.http["reader"].get("/leases/a%00b"),
        "release lease": lake.http["reader"].delete("/leases/a%00b"),
        "expiration": lake.http["reader"].get("/expirations/a%00b"),
        "job start (writer)": lake.http["w2"].post("/jobs/a%00b/start", json={"from": "latest"}),
        "register edge (writer)": lake.http["w2"].post("/register/sink/a%00b/lake/db/t"),
    }
    # A HEAD answer has no body: its status is all there is to check.
    assert lake.http["reader"].head(f"{TABLES}/a%00b").status_code == 400
    for what, answer in catalog_answers.items():  # the Iceberg error model
        message = iceberg_error(answer, 400, "BadRequestException")
        assert "NUL character" in message, (what, message)
    for what, answer in core_answers.items():  # the error shape of docs/contract.md#errors
        message = assert_error(answer, 422, "invalid_request")["message"]
        assert "NUL character" in message, (what, message)


def test_a_writer_does_not_end_a_table_a_live_read_session_serves_by_registering_over_it(
        lake: Lake) -> None:
    """``register`` with ``overwrite`` ends the table it replaces "as a drop ends it" — its
    barrier history, leases' entries, read-session cuts — but drops need the admin role
    (docs/contract.md#trust) and a session's cuts never change (docs/contract.md#read-sessions). w2
    ends w1's root table under a reader's live session: the session's next load of it is a 404."""
    from tests.metaservice.catalog.conftest import rest_catalog

    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    w1.create_table("db.r", schema=SCHEMA).append(
        rows(1), snapshot_properties={"metaservice.barrier": "100"})
    strong = rest_catalog(lake.url, token=lake.tokens["reader"], warehouse="lake@strong")
    assert strong.load_table("db.r").scan().to_arrow()["id"].to_pylist() == [1]
    lake.catalogs["w2"].create_table("db.o", schema=SCHEMA).append(rows(9))
    response = lake.http["w2"].post("/iceberg/v1/namespaces/db/register", json={
        "name": "r", "metadata-location": forged_copy(lake, "o", "forged"), "overwrite": True})
    assert strong.load_table("db.r").scan().to_arrow()["id"].to_pylist() == [1]
    assert lake.barriers("r")[0][0] == 100
    refused(response, 403, "forbidden")


def test_a_purge_spares_files_another_table_writes_under_its_location(
        lake: Lake, purges: Purges) -> None:
    """``write.data.path`` and ``write.metadata.path`` are only confined to the warehouse, not
    kept out of other tables' locations: w2 points those of w1's root table into its own table
    ``evil``; w1's next append writes its data, manifests and manifest list there; a snapshot of
    evil names that manifest list, and an admin's purge of evil deletes w1's rows."""

    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    w1.create_table("db.victim", schema=SCHEMA)
    lake.catalogs["w2"].create_table("db.evil", schema=SCHEMA)
    evil_dir = lake.warehouse / "db" / "evil"
    redirected = lake.commit("w2", "victim", [{"action": "set-properties", "updates": {
        "write.data.path": str(evil_dir / "data"),
        "write.metadata.path": str(evil_dir / "metadata")}}])
    w1.load_table("db.victim").append(rows(1, 2))
    manifest_list = w1.load_table("db.victim").current_snapshot().manifest_list  # type: ignore[union-attr]
    if manifest_list.startswith(str(evil_dir)):
        snapshot = {"snapshot-id": 4242, "sequence-number": 1,
                    "timestamp-ms": 1_700_000_000_000, "manifest-list": manifest_list,
                    "summary": {"operation": "append"}, "schema-id": 0}
        assert lake.commit("w2", "evil", [
            {"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
             "snapshot-id": 4242}]).status_code == 200
        lake.catalogs["admin"].purge_table("db.evil")
        purges.wait_for(1)
    assert Path(manifest_list).exists(), (
        f"the purge of evil deleted victim's files (redirect: {redirected.status_code})")
    assert lake.ids("victim") == [1, 2]


def test_the_core_api_does_not_move_a_catalog_tables_answer_back(lake: Lake) -> None:
    """The catalog refuses to move ``main`` of ``db.r`` back, but ``POST /tables/.../barriers``
    (a root report, any writer) records a newer barrier at an older snapshot of the same
    table, or at one it does not have: strong reads and read sessions then answer 1 row where the
    head holds 3 (docs/contract.md#trust: the same promises on every update path, against every
    caller)."""
    w1 = lake.catalogs["w1"]
    w1.create_namespace("db")
    table = w1.create_table("db.r", schema=SCHEMA)
    snapshots = []
    for i in range(3):
        table.append(rows(i), snapshot_properties={"metaservice.barrier": str(100 * (i + 1))})
        snapshots.append(lake.head("r"))
    answers = [lake.http["w2"].post("/tables/lake/db/r/barriers",
                                    json={"barrier": 400 + k, "snapshot_id": snapshot_id})
               for k, snapshot_id in enumerate((snapshots[0], 12345))]
    strong = lake.http["reader"].get("/version/strong/lake/db/r").json()
    assert strong.get("snapshot_id") == snapshots[2], (strong, [a.status_code for a in answers])
    for answer in answers:
        assert_error(answer, 409, "held_by_catalog")
