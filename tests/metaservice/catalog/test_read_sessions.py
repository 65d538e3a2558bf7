"""Read sessions of the catalog's consistent warehouses (docs/contract.md#consistent-warehouses)
through pyiceberg's own REST client, on both backends: ``lake@strong`` read sessions,
``lake@barrier=<B>``, read-only, leases, expiry, the prefix of sessions opened before the rename."""

from __future__ import annotations

import threading

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError, ForbiddenError, NoSuchTableError
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField

from metaservice.catalog.read_sessions.consistent_warehouses import cut_metadata_location
from metaservice.clock import ManualClock
from tests.conftest import ServerThread
from tests.metaservice.catalog.conftest import rest_catalog
from tests.metaservice.catalog.pipeline import SCHEMA, FanOut, consistent, ids
from tests.metaservice.jobs.test_jobs import plan


def read_session(server: ServerThread, name: str = "lake@strong") -> RestCatalog:
    """A new read session of the consistent warehouse ``name``."""
    return rest_catalog(server.url, warehouse=name)


@pytest.fixture
def pipeline(catalog: RestCatalog, client: httpx.Client, clock: ManualClock) -> FanOut:
    return FanOut(catalog, client, clock)


def snapshot_at(client: httpx.Client, table: str, barrier: int) -> int:
    """The snapshot MetaService records for ``table`` at ``barrier`` (an explicit version)."""
    answer = client.post("/versions", json={"tables": [table], "barrier": barrier})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["versions"][table]["snapshot_id"])


def test_a_strong_read_session_serves_every_table_of_a_pipeline_at_one_barrier(
        pipeline: FanOut, catalog: RestCatalog, client: httpx.Client,
        server: ServerThread) -> None:
    first = pipeline.ingest(3)
    assert pipeline.step("a") == first and pipeline.step("b") == first
    second = pipeline.ingest(2)
    assert pipeline.step("a") == second  # b, the slow sibling, is still at the first barrier
    assert not consistent(catalog)  # the head mixes two barriers

    strong = read_session(server)
    assert consistent(strong)
    a = strong.load_table("db.a")
    assert a.metadata.properties["metaservice.barrier"] == str(first)
    assert a.metadata.properties["metaservice.consistency"] == "strong"
    at_first = snapshot_at(client, "lake.db.a", first)
    assert a.metadata.current_snapshot_id == at_first
    assert a.metadata.refs["main"].snapshot_id == at_first
    # Newer snapshots are left out: some engines read the newest entry of `snapshots`.
    assert a.metadata.snapshots[-1].snapshot_id == at_first
    assert all(entry.snapshot_id != catalog.load_table("db.a").metadata.current_snapshot_id
               for entry in a.metadata.snapshot_log)

    # The session's cut stays while the pipeline moves on; a new session sees the new cut.
    assert pipeline.step("b") == second
    third = pipeline.ingest(1)
    assert pipeline.step("a") == third
    assert ids(strong, "db.b") == list(range(3)) and consistent(strong)
    fresh = read_session(server)
    assert ids(fresh, "db.b") == list(range(5)) and consistent(fresh)
    assert fresh.load_table("db.a").metadata.properties["metaservice.barrier"] == str(second)


def read_metadata_file(location: str) -> TableMetadata:
    """The metadata file at ``location``, read as an engine reads it."""
    return FromInputFile.table_metadata(load_file_io({}, location).new_input(location))


def test_a_read_session_answers_a_metadata_file_of_its_cut(
        pipeline: FanOut, catalog: RestCatalog, client: httpx.Client,
        server: ServerThread) -> None:
    """Engines that read the file at ``metadata-location`` (DuckDB lists snapshots from it)
    see the cut too: the file holds exactly the served metadata, no newer snapshot; sessions at
    the same cut share it; the head's pointer and files are untouched."""
    first = pipeline.ingest(3)
    pipeline.step("a"), pipeline.step("b")
    pipeline.ingest(2)
    pipeline.step("a")  # the head of a is one barrier past the strong cut
    head = catalog.load_table("db.a")
    at_first = snapshot_at(client, "lake.db.a", first)
    assert head.metadata.current_snapshot_id != at_first

    served = read_session(server).load_table("db.a")
    assert served.metadata_location != head.metadata_location
    in_file = read_metadata_file(served.metadata_location)
    assert in_file == served.metadata
    assert in_file.current_snapshot_id == at_first
    cut_time = in_file.snapshot_by_id(at_first).timestamp_ms  # type: ignore[union-attr]
    assert head.metadata.current_snapshot_id not in {s.snapshot_id for s in in_file.snapshots}
    assert all(s.timestamp_ms <= cut_time for s in in_file.snapshots)
    assert all(e.timestamp_ms <= cut_time for e in in_file.snapshot_log)

    # Another session at the same cut shares the file, also after the head moved on; a session
    # of the barrier's consistent warehouse has its own.
    assert read_session(server).load_table("db.a").metadata_location == served.metadata_location
    pipeline.ingest(1)
    pipeline.step("a")  # the head of a moves on, b holds the strong cut at the first barrier
    assert catalog.load_table("db.a").metadata_location != head.metadata_location
    assert read_session(server).load_table("db.a").metadata_location == served.metadata_location
    at_barrier = read_session(server, f"lake@barrier={first}").load_table("db.a")
    assert at_barrier.metadata_location not in (served.metadata_location,
                                                head.metadata_location)
    assert read_metadata_file(at_barrier.metadata_location) == at_barrier.metadata

    # The head's files are untouched, and commits go on from it.
    assert read_metadata_file(head.metadata_location) == head.metadata
    assert pipeline.step("b") is not None
    assert ids(catalog, "db.b") == list(range(6))


def test_a_cut_file_is_named_after_its_content() -> None:
    """One name per served content, in the head file's directory, and never one that passes
    for a version of the table's history."""
    head = "s3://bucket/db/t/metadata/00007-6c97e413-d51b-4538-ac70-12fe2a85cb83.metadata.json"
    served = new_table_metadata(Schema(NestedField(1, "id", LongType(), required=False)),
                                UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER,
                                "s3://bucket/db/t", {"metaservice.barrier": "100"})
    name = cut_metadata_location(head, served.model_dump_json().encode())
    assert name == cut_metadata_location(head, served.model_copy().model_dump_json().encode())
    assert name.startswith("s3://bucket/db/t/metadata/cut-")
    assert name.endswith(".metadata.json")
    other = served.model_copy(update={"properties": {"metaservice.barrier": "101"}})
    assert cut_metadata_location(head, other.model_dump_json().encode()) != name
    assert MetastoreCatalog._parse_metadata_version(head) == 7
    assert MetastoreCatalog._parse_metadata_version(name) == -1


def test_a_barrier_read_session_serves_every_table_at_that_barrier(
        pipeline: FanOut, catalog: RestCatalog, server: ServerThread) -> None:
    first = pipeline.ingest(3)
    pipeline.step("a"), pipeline.step("b")
    second = pipeline.ingest(2)
    pipeline.step("a"), pipeline.step("b")
    pipeline.ingest(1)
    pipeline.step("a")
    at_first = read_session(server, f"lake@barrier={first}")
    assert ids(at_first, "db.b") == list(range(3)) and consistent(at_first)
    table = at_first.load_table("db.orders")
    assert table.metadata.properties["metaservice.consistency"] == "barrier"
    at_second = read_session(server, f"lake@barrier={second}")
    assert at_second.load_table("db.a").scan().to_arrow().num_rows == 5
    # b has not completed the third barrier: the barrier_not_complete of
    # docs/contract.md#at-an-explicit-barrier, as a 409.
    beyond = read_session(server, f"lake@barrier={pipeline.clock.now_ms()}")
    with pytest.raises(Exception, match="barrier_not_complete"):
        beyond.load_table("db.b")


def test_read_sessions_are_read_only(pipeline: FanOut, client: httpx.Client,
                                     server: ServerThread) -> None:
    pipeline.ingest(1)
    strong = read_session(server)
    table = strong.load_table("db.orders")
    with pytest.raises(ForbiddenError, match="read-only session"):
        table.append(pa.table({"id": [99]}, schema=SCHEMA))
    with pytest.raises(ForbiddenError):
        strong.create_namespace("other")
    with pytest.raises(ForbiddenError):
        strong.drop_table("db.orders")
    prefix = client.get("/iceberg/v1/config", params={"warehouse": "lake@strong"}).json()[
        "overrides"]["prefix"]
    refused = client.post(f"/iceberg/v1/{prefix}/transactions/commit", json={})
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "ForbiddenException"
    assert ids(pipeline.catalog, "db.orders") == [0]


def test_a_session_leases_what_it_serves_and_expires_after_its_last_use(
        pipeline: FanOut, client: httpx.Client, server: ServerThread,
        clock: ManualClock) -> None:
    pipeline.ingest(1)
    pipeline.step("a")
    strong = read_session(server)
    served = strong.load_table("db.a").metadata.current_snapshot_id
    leases = client.get("/leases").json()["leases"]
    (lease,) = [entry for entry in leases if entry["holder"] == "lake@strong"]
    assert {(s["table"], s["snapshot_id"]) for s in lease["snapshots"]} == {
        ("lake.db.a", served)}
    # Protected: an expiration of the served snapshot is refused while the session lives.
    request = client.post("/tables/lake/db/a/expirations", json={"snapshot_ids": [served]})
    assert request.status_code == 201, request.text
    (refused,) = request.json()["refused"]
    assert refused["snapshot_id"] == served
    assert f"lease:{lease['lease_id']}" in refused["reasons"]

    # A use runs the term again, lazily: a renewal grants the term and a tenth of it, and a
    # load renews only once that tenth has passed, so it still leaves the session its term.
    def expires_at() -> int:
        (entry,) = [e for e in client.get("/leases").json()["leases"]
                    if e["lease_id"] == lease["lease_id"]]
        return int(entry["expires_at"])

    term = 3600 * 1000
    renewed = clock.now_ms()
    first = expires_at()
    assert first == renewed + term + term // 10  # the load that fixed the cut renewed
    clock.advance(term // 10)
    strong.load_table("db.a")  # exactly its term left: nothing written
    assert expires_at() == first
    clock.advance(1)
    strong.load_table("db.a")  # less than its term left: renewed
    assert expires_at() == clock.now_ms() + term + term // 10

    clock.advance(term)
    assert strong.load_table("db.a").metadata.current_snapshot_id == served  # renews
    clock.advance(term + term // 10 - 1)
    assert strong.load_table("db.a").metadata.current_snapshot_id == served  # its last ms
    clock.advance(term + term // 10)
    with pytest.raises(NoSuchTableError, match="read session .* expired"):
        strong.load_table("db.a")


def test_a_repeat_load_that_writes_nothing_still_needs_a_live_session_of_the_caller(
        pipeline: FanOut, client: httpx.Client, server: ServerThread,
        clock: ManualClock) -> None:
    """The repeat load of a cut table, one read statement, answers only a live session: one
    released, or expired before a renewal was due, is 404 like any other."""
    pipeline.ingest(1)
    pipeline.step("a")
    prefix = client.get("/iceberg/v1/config", params={"warehouse": "lake@strong"}).json()[
        "overrides"]["prefix"]
    path = f"/iceberg/v1/{prefix}/namespaces/db/tables/a"
    first = client.get(path)
    assert first.status_code == 200, first.text
    again = client.get(path)  # the cut file's JSON is cached: the read-only path
    assert again.status_code == 200 and again.content == first.content
    assert client.delete(f"/leases/{prefix.removeprefix('session-')}").status_code == 204
    gone = client.get(path)
    assert gone.status_code == 404 and "expired or does not exist" in gone.text

    prefix = client.get("/iceberg/v1/config", params={"warehouse": "lake@strong"}).json()[
        "overrides"]["prefix"]
    path = f"/iceberg/v1/{prefix}/namespaces/db/tables/a"
    assert client.get(path).status_code == 200
    assert client.get(path).status_code == 200
    clock.advance(3600 * 1000 * 11 // 10 + 1)
    expired = client.get(path)
    assert expired.status_code == 404 and "expired or does not exist" in expired.text


def test_a_path_whose_prefix_names_no_session_is_not_a_session_route(
        catalog: RestCatalog, client: httpx.Client) -> None:
    """Read sessions' routes come first, but take only prefixes that can name a session: a
    namespace called ``namespaces`` is still the head's."""
    catalog.create_namespace("namespaces")
    catalog.create_table("namespaces.tables", schema=SCHEMA)
    assert client.get("/iceberg/v1/namespaces/namespaces").status_code == 200
    loaded = client.get("/iceberg/v1/namespaces/namespaces/tables/tables")
    assert loaded.status_code == 200, loaded.text
    assert "metaservice.barrier" not in loaded.json()["metadata"]["properties"]
    assert client.get("/iceberg/v1/nosession/namespaces").status_code == 404


def test_bad_warehouses_and_tables_without_a_version(
        catalog: RestCatalog, client: httpx.Client, server: ServerThread) -> None:
    for warehouse in ("other", "lake@weak", "lake@barrier=-1", "lake@barrier=x", "other@strong",
                      "lake@barrier=99999999999999999999"):
        answer = client.get("/iceberg/v1/config", params={"warehouse": warehouse})
        assert answer.status_code == 400, (warehouse, answer.text)
        assert answer.json()["error"]["type"] == "BadRequestException"
    with pytest.raises(BadRequestError):
        read_session(server, "lake@nothing")
    catalog.create_namespace("db")
    catalog.create_table("db.empty", schema=SCHEMA)
    with pytest.raises(NoSuchTableError, match="no barrier recorded"):
        read_session(server).load_table("db.empty")
    unknown = client.get("/iceberg/v1/session-00000000-0000-0000-0000-000000000000/namespaces/db"
                         "/tables/empty")
    assert unknown.status_code == 404 and "expired or does not exist" in unknown.text


def test_a_live_session_is_served_under_its_legacy_view_prefix(
        pipeline: FanOut, client: httpx.Client) -> None:
    """Sessions opened before the rename were answered ``view-<id>``: the same id under that
    prefix still names the session (same cut, same lease), while it lives."""
    pipeline.ingest(1)
    pipeline.step("a")
    prefix = client.get("/iceberg/v1/config", params={"warehouse": "lake@strong"}).json()[
        "overrides"]["prefix"]
    assert prefix.startswith("session-")
    legacy = "view-" + prefix.removeprefix("session-")
    current = client.get(f"/iceberg/v1/{prefix}/namespaces/db/tables/a")
    old = client.get(f"/iceberg/v1/{legacy}/namespaces/db/tables/a")
    assert current.status_code == old.status_code == 200, old.text
    assert old.json()["metadata-location"] == current.json()["metadata-location"]
    assert old.json()["metadata"]["properties"]["metaservice.consistency"] == "strong"
    assert client.get(f"/iceberg/v1/{legacy}/namespaces").status_code == 200
    assert client.post(f"/iceberg/v1/{legacy}/transactions/commit", json={}).status_code == 403
    lease_id = prefix.removeprefix("session-")
    assert client.delete(f"/leases/{lease_id}").status_code == 204
    assert client.get(f"/iceberg/v1/{legacy}/namespaces").status_code == 404


def test_loads_of_one_session_racing_get_one_cut(
        pipeline: FanOut, server: ServerThread) -> None:
    """Engines load tables in parallel, while the pipeline moves on: every table of the
    pipeline loaded in one session is still served at one barrier."""
    pipeline.ingest(2)
    pipeline.step("a"), pipeline.step("b")
    stop = threading.Event()
    failures: list[BaseException] = []

    def advance() -> None:
        try:
            while not stop.is_set():
                pipeline.ingest(1)
                pipeline.step("a")
                pipeline.step("b")
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    writer = threading.Thread(target=advance)
    writer.start()
    try:
        for _ in range(4):
            prefix = httpx.get(f"{server.url}/iceberg/v1/config",
                               params={"warehouse": "lake@strong"}).json()["overrides"]["prefix"]
            barriers: list[str] = []

            def load(table: str, prefix: str = prefix, barriers: list[str] = barriers) -> None:
                answer = httpx.get(f"{server.url}/iceberg/v1/{prefix}/namespaces/db/tables/{table}",
                                   timeout=30)
                assert answer.status_code == 200, answer.text
                barriers.append(answer.json()["metadata"]["properties"]["metaservice.barrier"])

            loaders = [threading.Thread(target=load, args=(t,)) for t in ("a", "b", "orders") * 2]
            for loader in loaders:
                loader.start()
            for loader in loaders:
                loader.join()
            assert len(barriers) == 6 and len(set(barriers)) == 1, barriers
    finally:
        stop.set()
        writer.join()
    assert not failures, failures



def test_a_table_left_out_of_the_strong_cut_is_404_in_a_session_whichever_load_came_first(
        pipeline: FanOut, client: httpx.Client, server: ServerThread) -> None:
    """A table with no version yet (404 ``no_version``) or one that rejoined the pipeline and
    has not caught up (404 ``catching_up``) is left out of the strong cut
    (docs/contract.md#catching-up). A session answers it so whether it is the session's first load
    or one after another table fixed the cut: not 400 ``barrier_not_complete``, which tells a client
    that no retry can help, while a new session serves the table once it caught up."""
    def refused_alone(code: str) -> None:
        alone = client.get("/version/strong/lake/db/b")
        assert alone.status_code == 404 and alone.json()["error"]["code"] == code, alone.text

    def refused_in_sessions(code: str, cut: int) -> None:
        with pytest.raises(NoSuchTableError, match=code):
            read_session(server).load_table("db.b")
        strong = read_session(server)
        assert strong.load_table("db.a").metadata.properties["metaservice.barrier"] == str(cut)
        with pytest.raises(NoSuchTableError, match=code):
            strong.load_table("db.b")

    first = pipeline.ingest(3)
    assert pipeline.step("a") == first
    assert client.post("/jobs/b/start", json={}).status_code == 200  # never commits
    refused_alone("no_version")
    refused_in_sessions("no_version", first)

    assert pipeline.step("b") == first
    assert client.post("/unregister/b").status_code == 200
    second = pipeline.ingest(2)
    assert pipeline.step("a") == second
    plan(client, "b", ["lake.db.orders"], ["lake.db.b"])
    assert client.post("/jobs/b/start", json={}).status_code == 200  # rejoins at the cut
    refused_alone("catching_up")
    refused_in_sessions("catching_up", second)

    assert pipeline.step("b") == second  # caught up: a new session serves it at the cut
    assert ids(read_session(server), "db.b") == list(range(5))


def test_a_catching_up_table_past_the_sessions_cut_but_not_exact_there_is_catching_up(
        pipeline: FanOut, client: httpx.Client, server: ServerThread) -> None:
    """A table that rejoined the pipeline from a later barrier than the strong cut (so it is
    past the cut, yet not exact at it) is left out of the cut while it catches up: a session
    whose cut another table fixed answers it 404 ``catching_up``, as a strong request for it
    would be, not 400 ``barrier_not_exact``, which tells a client that no retry can help."""
    first = pipeline.ingest(3)
    assert pipeline.step("a") == pipeline.step("b") == first
    assert client.post("/unregister/b").status_code == 200
    second = pipeline.ingest(2)
    assert pipeline.step("a") == second
    third = pipeline.ingest(1)
    plan(client, "b", ["lake.db.orders"], ["lake.db.b"])
    started = client.post("/jobs/b/start", json={"from": third})
    assert started.status_code == 200 and started.json()["barrier"] == third, started.text
    pipeline.started.add("b")
    orders = pipeline.catalog.load_table("db.orders")
    pipeline.tables["b"].overwrite(orders.scan().to_arrow(), snapshot_properties={
        "metaservice.job": "b", "metaservice.barrier": str(third)})
    alone = client.get("/version/strong/lake/db/b")
    assert alone.status_code == 404 and alone.json()["error"]["code"] == "catching_up", alone.text

    strong = read_session(server)
    assert strong.load_table("db.a").metadata.properties["metaservice.barrier"] == str(second)
    with pytest.raises(NoSuchTableError, match="catching_up"):
        strong.load_table("db.b")
