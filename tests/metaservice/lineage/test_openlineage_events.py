"""OpenLineage events of a pipeline, as a receiver gets them (docs/contract.md#lineage; issue:
lineage in the ecosystem's own language): over HTTP and through the file transport, configured the
way OpenLineage users configure the client, valid, and naming the exact snapshots of each
barrier."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from sqlalchemy import select

from metaservice import openlineage as ol
from metaservice.app import create_app
from metaservice.clock import ManualClock
from metaservice.db.models import IcebergTableRow
from metaservice.db.session import Database
from metaservice.settings import Settings
from tests.conftest import ServerThread, missing
from tests.metaservice.jobs.test_jobs import plan
from tests.metaservice.lineage.openlineage_checks import (
    Receiver,
    check_with_client_models,
    check_with_json_schemas,
    spec_dir,
)

CATALOG_URI = "http://127.0.0.1:8000/iceberg"
BARRIER_FACET_URL = ("http://127.0.0.1:8000/openlineage/facets/1-0-0/"
                     "MetaServiceBarrierRunFacet.json")

# (OpenLineage job, event type, barrier, attempt) in the order each job's events are written.
EXPECTED = {
    "lake.db.src@ingestion": [("COMPLETE", 1000, 1), ("COMPLETE", 2000, 1),
                              ("COMPLETE", 3000, 1)],
    "j": [("START", 2000, 1), ("COMPLETE", 2000, 1), ("START", 3000, 1), ("FAIL", 3000, 1),
          ("START", 3000, 2), ("COMPLETE", 3000, 2)],
    "k": [("START", 2000, 1), ("COMPLETE", 2000, 1)],
}


def run_pipeline(http: httpx.Client, app: Any = None) -> None:
    """src → j → mid → k → out. Newer source snapshots land before each commit: the events
    must name the snapshots read at the barrier, not the newest. With ``app``, ``src`` is a
    table of the built-in catalog (``src_in_the_builtin_catalog``): its root snapshots are
    recorded as the catalog's commits record them."""
    def ok(response: httpx.Response) -> dict[str, Any]:
        assert response.status_code == 200, response.text
        return response.json()

    def report_src(snapshot_id: int, barrier: int) -> None:
        if app is None:
            ok(http.post("/tables/lake/db/src/barriers",
                         json={"snapshot_id": snapshot_id, "barrier": barrier}))
            return
        from metaservice.barriers import service as barriers_service
        from metaservice.names import TableName

        with app.state.database.transaction(write=True) as session:
            barriers_service.report_root(session, app.state.context,
                                         TableName.parse("lake.db.src"),
                                         snapshot_id=snapshot_id, barrier=barrier,
                                         via_catalog=True)

    plan(http, "j", ["lake.db.src"], ["lake.db.mid"])
    plan(http, "k", ["lake.db.mid"], ["lake.db.out"])
    report_src(11, 1000)
    report_src(12, 2000)
    assert ok(http.post("/jobs/j/start", json={"from": "latest"}))["barrier"] == 2000
    report_src(13, 3000)
    ok(http.post("/commit/j/lake/db/mid", json={"barrier": 2000, "snapshot_id": 21}))
    assert ok(http.post("/jobs/k/start", json={"from": "latest"}))["barrier"] == 2000
    assert ok(http.post("/jobs/j/barriers/next", json={"after": 2000}))["barrier"] == 3000
    ok(http.post("/jobs/j/barriers/3000/abort", json={"reason": "executor lost"}))
    assert ok(http.post("/jobs/j/barriers/next", json={"after": 2000}))["barrier"] == 3000
    ok(http.post("/commit/j/lake/db/mid", json={"barrier": 3000, "snapshot_id": 22}))
    ok(http.post("/commit/k/lake/db/out", json={"barrier": 2000, "snapshot_id": 31}))


def deliver_all(app: Any) -> None:
    sender = app.state.lineage_sender
    assert sender is not None
    while sender.run_once():
        pass


def outbox_count(database: Database) -> int:
    from metaservice.repositories import lineage as repository

    with database.transaction(write=False) as session:
        return repository.standing(session).pending


@pytest.fixture
def pipeline_app(database: Database, settings: Settings, clock: ManualClock,
                 openlineage_env: dict[str, str]) -> Iterator[Callable[[dict[str, str]], Any]]:
    """An app built after the given OpenLineage variables are set (the standard way)."""
    apps: list[Any] = []

    def build(env: dict[str, str]) -> Any:
        openlineage_env.update(env)
        apps.append(create_app(settings, clock=clock, database=database))
        return apps[-1]

    yield build


def src_in_the_builtin_catalog(database: Database) -> None:
    """``lake.db.src`` is a table of the built-in catalog, at a location the server knows."""
    with database.transaction(write=True) as session:
        session.add(IcebergTableRow(namespace="db", name="src", metadata_location="x",
                                    version=1, created_at=0, updated_at=0,
                                    table_uuid=str(uuid.uuid4()),
                                    location="file:///warehouse/db/src"))


def by_job(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    jobs: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        jobs.setdefault(event["job"]["name"], []).append(event)
    return jobs


def shape(event: dict[str, Any]) -> tuple[str, int, int]:
    facet = event["run"]["facets"][ol.BARRIER_FACET]
    return event["eventType"], facet["barrier"], facet["attempt"]


def versions(datasets: list[dict[str, Any]]) -> dict[str, str | None]:
    return {f"{d['namespace']} {d['name']}": d["facets"].get("version", {}).get("datasetVersion")
            for d in datasets}


def check_pipeline_events(events: list[dict[str, Any]], barrier_facet_schema: dict) -> None:
    jobs = by_job(events)
    assert {job: [shape(e) for e in evs] for job, evs in jobs.items()} == EXPECTED
    src = "file /warehouse/db/src"  # named by its location: it is in the built-in catalog
    mid, out = f"{CATALOG_URI} db.mid", f"{CATALOG_URI} db.out"
    j, k = jobs["j"], jobs["k"]
    # Each barrier names exactly the snapshots read (snap(s, B)), and those committed.
    assert versions(j[0]["inputs"]) == {src: "12"} and versions(j[0]["outputs"]) == {mid: None}
    assert versions(j[1]["inputs"]) == {src: "12"}  # 13 was newer, not read at 2000
    assert versions(j[1]["outputs"]) == {mid: "21"}
    assert versions(j[5]["inputs"]) == {src: "13"} and versions(j[5]["outputs"]) == {mid: "22"}
    assert versions(k[1]["inputs"]) == {mid: "21"}  # 22 was newer, not read at 2000
    assert versions(k[1]["outputs"]) == {out: "31"}
    ingestion = jobs["lake.db.src@ingestion"]
    assert [versions(e["outputs"]) for e in ingestion] == [{src: "11"}, {src: "12"},
                                                          {src: "13"}]
    assert all(e["inputs"] == [] for e in ingestion)
    # The barrier facet: the incremental step of j at 3000 read the changes after 12.
    facet = j[5]["run"]["facets"][ol.BARRIER_FACET]
    assert facet["previousBarrier"] == 2000
    assert facet["inputs"] == [{"table": "lake.db.src", "barrier": 3000, "snapshotId": 13,
                                "previousBarrier": 2000, "previousSnapshotId": 12}]
    assert facet["outputs"] == [{"table": "lake.db.mid", "snapshotId": 22}]
    assert j[3]["run"]["facets"]["errorMessage"]["message"] == "executor lost"
    # One run per attempt: START and its terminal event share the run id, attempts differ.
    run_ids = [e["run"]["runId"] for e in j]
    assert run_ids[0] == run_ids[1] and run_ids[2] == run_ids[3] and run_ids[4] == run_ids[5]
    assert len({run_ids[0], run_ids[2], run_ids[4]}) == 3
    for event in events:
        parsed = uuid.UUID(event["run"]["runId"])
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert int.from_bytes(parsed.bytes[:6], "big") == shape(event)[1]  # its time: B
        assert event["job"]["namespace"] == "metaservice"
        for dataset in event["inputs"] + event["outputs"]:
            table = dataset["name"].rsplit("/", 1)[-1].rsplit(".", 1)[-1]
            assert dataset["facets"]["symlinks"]["identifiers"] == [
                {"namespace": CATALOG_URI, "name": f"db.{table}", "type": "TABLE"}]
            assert dataset["facets"]["catalog"]["type"] == "rest"
        check_with_client_models(event, {ol.BARRIER_FACET})
        inner = barrier_facet_schema["$defs"]["MetaServiceBarrierRunFacet"]["allOf"][1]
        Draft202012Validator(inner).validate(event["run"]["facets"][ol.BARRIER_FACET])
        assert event["run"]["facets"][ol.BARRIER_FACET]["_schemaURL"] == (
            BARRIER_FACET_URL + "#/$defs/MetaServiceBarrierRunFacet")


def served_facet_schema(http: httpx.Client) -> dict[str, Any]:
    answer = http.get("/openlineage/facets/1-0-0/MetaServiceBarrierRunFacet.json")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/schema+json"
    schema = answer.json()
    assert schema["$id"] == BARRIER_FACET_URL
    return schema


def test_a_pipeline_s_events_reach_an_http_receiver_named_exactly(
        pipeline_app: Callable[[dict[str, str]], Any], database: Database) -> None:
    with Receiver() as receiver:
        app = pipeline_app({"OPENLINEAGE_URL": receiver.url})
        src_in_the_builtin_catalog(database)
        with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
            run_pipeline(http, app)
            assert receiver.events == []  # written, not sent: the sender is not running
            assert outbox_count(database) == 11
            deliver_all(app)
            schema = served_facet_schema(http)
    assert outbox_count(database) == 0  # delivered events are pruned
    assert set(receiver.paths) == {"/api/v1/lineage"}
    check_pipeline_events(receiver.events, schema)


def test_a_pipeline_s_events_reach_the_file_transport(
        pipeline_app: Callable[[dict[str, str]], Any], database: Database,
        tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    app = pipeline_app({"OPENLINEAGE__TRANSPORT__TYPE": "file",
                        "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(path),
                        "OPENLINEAGE__TRANSPORT__APPEND": "true"})
    src_in_the_builtin_catalog(database)
    with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
        run_pipeline(http, app)
        deliver_all(app)
        schema = served_facet_schema(http)
    events = [json.loads(line) for line in path.read_text().splitlines()]
    check_pipeline_events(events, schema)


def test_a_pipeline_s_events_reach_a_kafka_topic_each_job_in_order(
        pipeline_app: Callable[[dict[str, str]], Any], database: Database, kafka: Any) -> None:
    """OpenLineage's Kafka transport, configured by its variables, against a real broker: every
    event arrives, and a job's events share a partition (the transport's message key), so a
    consumer reads each job's events in the order they were written."""
    from confluent_kafka import Consumer, TopicPartition

    topic = f"lineage-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=3)
    app = pipeline_app({"OPENLINEAGE__TRANSPORT__TYPE": "kafka",
                        "OPENLINEAGE__TRANSPORT__TOPIC": topic,
                        # quiet: the app's producer outlives the test, and the broker the
                        # test session (librdkafka logs every reconnection attempt)
                        "OPENLINEAGE__TRANSPORT__CONFIG": json.dumps(
                            {"bootstrap.servers": kafka.bootstrap, "log_level": "0"})})
    src_in_the_builtin_catalog(database)
    with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
        run_pipeline(http, app)
        deliver_all(app)
        schema = served_facet_schema(http)
    assert outbox_count(database) == 0
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": topic,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    received: list[tuple[int, int, dict[str, Any]]] = []
    keys: set[tuple[str, bytes]] = set()
    deadline = time.monotonic() + 30
    while len(received) < 11 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            event = json.loads(message.value())
            received.append((message.partition(), message.offset(), event))
            keys.add((event["job"]["name"], message.key()))
    consumer.close()
    received.sort(key=lambda r: (r[0], r[1]))
    assert keys == {(job, f"run:metaservice/{job}".encode()) for job in EXPECTED}
    partitions = {job: {p for p, _, e in received if e["job"]["name"] == job}
                  for job in EXPECTED}
    assert all(len(found) == 1 for found in partitions.values()), partitions
    check_pipeline_events([event for _, _, event in received], schema)


def test_without_openlineage_configuration_no_event_is_written(
        pipeline_app: Callable[[dict[str, str]], Any], database: Database) -> None:
    app = pipeline_app({})
    assert app.state.lineage_sender is None and app.state.context.lineage is None
    with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
        run_pipeline(http)
    assert outbox_count(database) == 0


def test_openlineage_disabled_writes_no_event(
        pipeline_app: Callable[[dict[str, str]], Any], database: Database) -> None:
    app = pipeline_app({"OPENLINEAGE_URL": "http://127.0.0.1:9", "OPENLINEAGE_DISABLED": "true"})
    assert app.state.lineage_sender is None
    with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
        run_pipeline(http)
    assert outbox_count(database) == 0


def test_the_events_validate_against_the_openlineage_json_schemas(
        pipeline_app: Callable[[dict[str, str]], Any], database: Database) -> None:
    """Needs the spec's schema files (``METASERVICE_TEST_OPENLINEAGE_SPEC_DIR``, or
    ``shared/openlineage/spec`` beside the checkout): no package ships them. Skips without them
    on a developer's machine, fails under CI."""
    if spec_dir() is None:
        missing("OpenLineage's JSON schemas (its spec/ directory) are neither in "
                "METASERVICE_TEST_OPENLINEAGE_SPEC_DIR nor beside the checkout "
                "(../shared/openlineage/spec)", required_by="CI")
    with Receiver() as receiver:
        app = pipeline_app({"OPENLINEAGE_URL": receiver.url})
        src_in_the_builtin_catalog(database)
        with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
            run_pipeline(http, app)
            deliver_all(app)
            schema = served_facet_schema(http)
    assert len(receiver.events) == 11
    for event in receiver.events:
        check_with_json_schemas(event, [schema])


def written_events(database: Database) -> list[dict[str, Any]]:
    from metaservice.db.models import LineageOutboxRow

    with database.transaction(write=False) as session:
        return [json.loads(p) for p in session.scalars(
            select(LineageOutboxRow.payload).order_by(LineageOutboxRow.id))]


def test_invalidation_unregister_and_jobs_without_sources_have_their_events(
        pipeline_app: Callable[[dict[str, str]], Any], database: Database) -> None:
    app = pipeline_app({"OPENLINEAGE__TRANSPORT__TYPE": "console"})
    with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
        plan(http, "ingest", [], ["lake.db.raw"])
        plan(http, "a", ["lake.db.raw"], ["lake.db.clean"])
        assert http.post("/jobs/ingest/start").status_code == 200
        for snapshot, barrier in ((1, 100), (2, 200)):
            assert http.post("/commit/ingest/lake/db/raw",
                             json={"barrier": barrier, "snapshot_id": snapshot}).status_code == 200
        assert http.post("/jobs/a/start", json={"from": "latest"}).json()["barrier"] == 200
        plan_id = http.post("/rollback-plans",
                            json={"table": "lake.db.raw", "barrier": 100}).json()["id"]
        assert http.post(f"/rollback-plans/{plan_id}/apply").status_code == 200
        answer = http.post("/jobs/a/barriers/next", json={"after": None}).json()
        assert answer["action"] == "abort"
        assert http.post(f"/rollback-plans/{plan_id}/complete").status_code == 200
        assert http.post("/jobs/a/barriers/next", json={}).json()["action"] == "process"
        assert http.post("/unregister/a").status_code == 200
    events = written_events(database)
    ingest = [e for e in events if e["job"]["name"] == "ingest"]
    assert [(e["eventType"], versions(e["outputs"])) for e in ingest] == [
        ("COMPLETE", {f"{CATALOG_URI} db.raw": "1"}), ("COMPLETE", {f"{CATALOG_URI} db.raw": "2"})]
    a = [e for e in events if e["job"]["name"] == "a"]
    assert [shape(e)[:2] for e in a] == [("START", 200), ("FAIL", 200), ("START", 100),
                                         ("FAIL", 100)]
    assert a[1]["run"]["facets"]["errorMessage"]["message"] == answer["reason"]
    assert a[3]["run"]["facets"]["errorMessage"]["message"] == "job unregistered"
    assert a[0]["run"]["runId"] == a[1]["run"]["runId"] != a[2]["run"]["runId"]
    for event in events:
        check_with_client_models(event, {ol.BARRIER_FACET})


def test_tables_of_a_nested_namespace_are_named_by_their_quoted_dotted_names(
        pipeline_app: Callable[[dict[str, str]], Any], database: Database) -> None:
    """A namespace of two levels, ``sales dept`` and ``eu.west``: every dataset name, symlink,
    ingestion job and barrier facet writes it one part each in backticks, so that it is told
    apart from the namespace ``sales dept.eu`` with a table ``west...``, and the events are
    valid (against the JSON schemas too where they are at hand)."""
    from metaservice.names import TableName

    namespace = "lake.`sales dept`.`eu.west`"
    src, mid = f"{namespace}.`orders été`", f"{namespace}.`totals.v2`"
    in_catalog = {src: "`sales dept`.`eu.west`.`orders été`",
                  mid: "`sales dept`.`eu.west`.`totals.v2`"}
    location = "file:///warehouse/sales dept/eu.west/orders été"
    app = pipeline_app({"OPENLINEAGE__TRANSPORT__TYPE": "console"})
    with database.transaction(write=True) as session:  # src is in the built-in catalog
        session.add(IcebergTableRow(namespace="sales dept\x1feu.west", name="orders été",
                                    metadata_location="x", version=1, created_at=0,
                                    updated_at=0, table_uuid=str(uuid.uuid4()),
                                    location=location))
    with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
        for role, table in (("source", src), ("sink", mid)):
            answer = http.post(f"/register/{role}/j/{TableName.parse(table).path}")
            assert answer.status_code == 200, answer.text
        from metaservice.barriers import service as barriers_service

        with app.state.database.transaction(write=True) as session:  # as the catalog records it
            barriers_service.report_root(session, app.state.context, TableName.parse(src),
                                         snapshot_id=11, barrier=1000, via_catalog=True)
        assert http.post("/jobs/j/start", json={"from": "latest"}).json()["barrier"] == 1000
        answer = http.post(f"/commit/j/{TableName.parse(mid).path}",
                           json={"barrier": 1000, "snapshot_id": 21})
        assert answer.status_code == 200, answer.text
        schema = served_facet_schema(http)
    jobs = by_job(written_events(database))
    assert {job: [shape(e) for e in evs] for job, evs in jobs.items()} == {
        f"{src}@ingestion": [("COMPLETE", 1000, 1)],
        "j": [("START", 1000, 1), ("COMPLETE", 1000, 1)]}
    done = jobs["j"][1]
    assert versions(done["inputs"]) == {
        "file /warehouse/sales dept/eu.west/orders été": "11"}  # by location
    assert versions(done["outputs"]) == {f"{CATALOG_URI} {in_catalog[mid]}": "21"}
    for dataset, table in ((done["inputs"][0], src), (done["outputs"][0], mid)):
        assert dataset["facets"]["symlinks"]["identifiers"] == [
            {"namespace": CATALOG_URI, "name": in_catalog[table], "type": "TABLE"}]
    facet = done["run"]["facets"][ol.BARRIER_FACET]
    assert [i["table"] for i in facet["inputs"]] == [src]
    assert [o["table"] for o in facet["outputs"]] == [mid]
    for events in jobs.values():
        for event in events:
            check_with_client_models(event, {ol.BARRIER_FACET})
            if spec_dir() is not None:
                check_with_json_schemas(event, [schema])


def test_a_root_table_of_the_longest_name_has_an_ingestion_job_of_bounded_length(
        pipeline_app: Callable[[dict[str, str]], Any], database: Database) -> None:
    """A dotted name may run to many hundreds of characters (backticks doubled, each part quoted);
    the outbox keys its rows by job name, so a long one is cut and given a digest of the whole:
    the root report is written (on PostgreSQL too, whose column would refuse it), and two
    tables that share the first 400 characters still have two jobs."""
    from metaservice.names import TableName

    namespace = ["`" * 120, "`" * 120]  # each level written in 242 characters
    tables = [TableName.of("lake", namespace, "`" * 127 + end) for end in "ab"]
    assert len(str(tables[0])) > 700
    app = pipeline_app({"OPENLINEAGE__TRANSPORT__TYPE": "console"})
    with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
        for snapshot, table in enumerate(tables):
            answer = http.post(f"/tables/{table.path}/barriers",
                               json={"snapshot_id": 10 + snapshot, "barrier": 1000})
            assert answer.status_code == 200, answer.text
    jobs = by_job(written_events(database))
    assert {ol.ingestion_job(str(t)) for t in tables} == set(jobs), jobs.keys()
    assert all(len(job) <= ol.INGESTION_JOB_MAX for job in jobs)
    assert ol.ingestion_job("lake.db.src") == "lake.db.src@ingestion"  # short names as before
