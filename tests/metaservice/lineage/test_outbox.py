"""The OpenLineage outbox: events exist with the change they describe, senders deliver each
job's events in order, a failing receiver holds back only its job's events, a crashed
sender's claim lapses; operators see it in /metrics and `metaservice lineage`."""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import httpx
import pytest

from benchmarks._environment import free_port
from metaservice.app import create_app
from metaservice.barriers import service as barriers_service
from metaservice.clock import ManualClock
from metaservice.context import ServiceContext
from metaservice.db.engine import build_engine
from metaservice.db.session import Database
from metaservice.lineage.sender import OutboxSender, naming_from
from metaservice.names import TableName
from metaservice.repositories import lineage as outbox_repo
from metaservice.settings import Settings
from tests.conftest import ServerThread
from tests.metaservice.test_cli import run_cli


def lineage_context(settings: Settings, clock: ManualClock) -> ServiceContext:
    return ServiceContext(settings=settings, clock=clock, lineage=naming_from(settings))


def pending(database: Database) -> int:
    with database.transaction(write=False) as session:
        return outbox_repo.standing(session).pending


def write_events(database: Database, jobs: dict[str, int]) -> None:
    """``jobs[name]`` events for each job, interleaved, each payload naming its job and rank."""
    with database.transaction(write=True) as session:
        for rank in range(max(jobs.values())):
            for job, count in jobs.items():
                if rank < count:
                    outbox_repo.add_event(session, job=job, event_type="COMPLETE", barrier=rank,
                                          payload=json.dumps({"job": job, "rank": rank}),
                                          now_ms=1)


def test_an_event_exists_only_if_its_transaction_commits(database: Database, settings: Settings,
                                                         clock: ManualClock) -> None:
    ctx = lineage_context(settings, clock)
    name = TableName("lake", "db", "t")
    with pytest.raises(RuntimeError), database.transaction(write=True) as session:
        barriers_service.report_root(session, ctx, name, snapshot_id=1, barrier=10)
        raise RuntimeError("the request fails after the report")
    assert pending(database) == 0
    with database.transaction(write=True) as session:
        barriers_service.report_root(session, ctx, name, snapshot_id=1, barrier=10)
    assert pending(database) == 1
    with database.transaction(write=True) as session:  # an exact repeat records nothing
        barriers_service.report_root(session, ctx, name, snapshot_id=1, barrier=10)
    assert pending(database) == 1


def test_two_senders_deliver_each_job_in_order_once(database: Database,
                                                    database_url: str) -> None:
    """Two senders (two engines, as two server processes) share the outbox: every event is
    delivered once, and each job's in the order written."""
    jobs = {"a": 40, "b": 25, "c": 30}
    write_events(database, jobs)
    delivered: list[tuple[str, int, str]] = []
    lock = threading.Lock()
    rng = random.Random(7)

    def make_emit(sender: str):  # type: ignore[no-untyped-def]
        def emit(event: dict[str, Any]) -> None:
            time.sleep(rng.random() / 500)
            with lock:
                delivered.append((event["job"], event["rank"], sender))
        return emit

    databases = [Database(build_engine(database_url)) for _ in range(2)]
    senders = [OutboxSender(db, make_emit(f"s{i}"), jobs_per_cycle=2, events_per_job=7,
                            name=f"s{i}") for i, db in enumerate(databases)]

    def drain(sender: OutboxSender) -> None:
        deadline = time.monotonic() + 60
        while pending(database) and time.monotonic() < deadline:
            if not sender.run_once():
                time.sleep(0.005)

    threads = [threading.Thread(target=drain, args=(s,)) for s in senders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for db in databases:
        db.dispose()
    assert pending(database) == 0
    assert len(delivered) == sum(jobs.values())
    for job, count in jobs.items():
        assert [rank for j, rank, _ in delivered if j == job] == list(range(count))
    assert {s for _, _, s in delivered} == {"s0", "s1"}  # both took part


def test_a_failing_delivery_holds_back_its_job_only_and_is_retried(database: Database) -> None:
    write_events(database, {"down": 3, "up": 2})
    clock = ManualClock(1_000_000)
    failing = {"down"}
    delivered: list[tuple[str, int]] = []

    def emit(event: dict[str, Any]) -> None:
        if event["job"] in failing:
            raise ConnectionError("receiver unreachable")
        delivered.append((event["job"], event["rank"]))

    sender = OutboxSender(database, emit, clock=clock)
    assert sender.run_once() == 2
    assert delivered == [("up", 0), ("up", 1)]
    with database.transaction(write=False) as session:
        [head] = outbox_repo.job_standings(session, 10)
        assert outbox_repo.standing(session).failing_jobs == 1
    assert (head.job, head.pending, head.attempts) == ("down", 3, 1)
    assert head.next_attempt_at == 1_000_000 + 1000
    assert "receiver unreachable" in (head.last_error or "")
    failing.clear()
    assert sender.run_once() == 0  # not before its backoff
    clock.advance(1001)
    assert sender.run_once() == 3
    assert delivered[2:] == [("down", 0), ("down", 1), ("down", 2)]
    assert pending(database) == 0
    assert (sender.counts.sent, sender.counts.failed) == (5, 1)
    with database.transaction(write=False) as session:  # delivered: the job's failures reset
        assert outbox_repo.standing(session).failing_jobs == 0


def test_the_backoff_doubles_up_to_its_bound(database: Database) -> None:
    write_events(database, {"down": 1})
    clock = ManualClock(0)

    def emit(event: dict[str, Any]) -> None:
        raise ConnectionError("down")

    sender = OutboxSender(database, emit, clock=clock, max_backoff_seconds=5)
    waits = []
    for _ in range(5):
        clock.advance(10_000)
        sender.run_once()
        with database.transaction(write=False) as session:
            [head] = outbox_repo.job_standings(session, 1)
        waits.append(head.next_attempt_at - clock.now_ms())
    assert waits == [1000, 2000, 4000, 5000, 5000]


def test_a_crashed_sender_s_claim_lapses_and_another_delivers(database: Database) -> None:
    write_events(database, {"j": 3})
    clock = ManualClock(5_000_000)
    with database.transaction(write=True) as session:  # claimed, then the process died
        assert len(outbox_repo.claim(session, sender="dead", now_ms=clock.now_ms(),
                                     claim_ms=30_000, jobs=10, per_job=10)) == 3
    delivered: list[int] = []
    sender = OutboxSender(database, lambda e: delivered.append(e["rank"]), clock=clock)
    assert sender.run_once() == 0
    clock.advance(30_001)
    assert sender.run_once() == 3 and delivered == [0, 1, 2]


def test_metrics_show_the_outbox(database: Database, settings: Settings, clock: ManualClock,
                                 tmp_path: Any) -> None:
    from openlineage.client import OpenLineageClient

    closed = free_port()  # nothing listens there: deliveries fail at once
    client = OpenLineageClient(config={"transport": {
        "type": "http", "url": f"http://127.0.0.1:{closed}", "retry": {"total": 0}}})
    app = create_app(settings, clock=clock, database=database, openlineage_client=client)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        for barrier in (10, 20):
            assert http.post("/tables/lake/db/t/barriers",
                             json={"snapshot_id": barrier, "barrier": barrier}).status_code == 200
        app.state.lineage_sender.run_once()
        text = http.get("/metrics").text
        assert "metaservice_lineage_events_pending 2.0" in text
        assert "metaservice_lineage_jobs_failing 1.0" in text
        assert "metaservice_lineage_delivery_failures_total 1.0" in text
        assert "metaservice_lineage_events_sent_total 0.0" in text
        assert "metaservice_lineage_oldest_pending_seconds " in text


def test_the_cli_shows_where_the_outbox_stands(database: Database, database_url: str) -> None:
    write_events(database, {"nightly": 2, "hourly": 1})
    with database.transaction(write=True) as session:
        outbox_repo.record_failure(session, "nightly", "s", error="HTTPError: 503",
                                   retry_at_ms=2**62)
    result = run_cli("--database-url", database_url, "lineage",
                     env={"OPENLINEAGE_URL": "http://127.0.0.1:9"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "OpenLineage: configured"
    assert lines[1].startswith("outbox: 3 events pending, 1 jobs failing, oldest ")
    assert lines[2].startswith("job\tpending\tnext event")
    nightly = lines[3].split("\t")
    assert nightly[:3] == ["nightly", "2", "COMPLETE 0"]
    assert nightly[4] == "1" and nightly[5].startswith("in ") and nightly[6] == "HTTPError: 503"
    assert lines[4].split("\t")[:3] == ["hourly", "1", "COMPLETE 0"]


def test_the_cli_names_the_ingestion_of_a_nested_table_by_its_dotted_name(
        database: Database, database_url: str, settings: Settings, clock: ManualClock) -> None:
    """A root table of the namespace (sales dept, eu.west): its ingestion job is its dotted
    name, quoted as the API writes it, in a column of its own."""
    name = TableName.of("lake", ("sales dept", "eu.west"), "orders été")
    with database.transaction(write=True) as session:
        barriers_service.report_root(session, lineage_context(settings, clock), name,
                                     snapshot_id=1, barrier=10)
    result = run_cli("--database-url", database_url, "lineage",
                     env={"OPENLINEAGE_URL": "http://127.0.0.1:9"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[3].split("\t")[:3] == [
        "lake.`sales dept`.`eu.west`.`orders été`@ingestion", "1", "COMPLETE 10"]


def test_a_server_without_its_sender_writes_events_that_lineage_send_delivers(
        database: Database, database_url: str, settings: Settings, clock: ManualClock,
        openlineage_env: dict[str, str]) -> None:
    """``METASERVICE_LINEAGE_SENDER=none``: the server writes its events and sends none; a
    ``metaservice lineage-send`` process delivers them, in order, and empties the outbox."""
    from tests.metaservice.lineage.openlineage_checks import Receiver

    with Receiver() as receiver:
        openlineage_env.update({"OPENLINEAGE_URL": receiver.url})
        app = create_app(settings.model_copy(update={"lineage_sender": "none"}), clock=clock,
                         database=database)
        assert app.state.lineage_sender is None and app.state.context.lineage is not None
        with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
            for barrier in (10, 20, 30):
                answer = http.post("/tables/lake/db/t/barriers",
                                   json={"snapshot_id": barrier, "barrier": barrier})
                assert answer.status_code == 200, answer.text
            time.sleep(0.5)  # a sender thread, were there one, would have delivered by now
        assert pending(database) == 3 and receiver.events == []
        result = run_cli("--database-url", database_url, "lineage-send", "--once",
                         env={"OPENLINEAGE_URL": receiver.url})
        assert result.returncode == 0, result.stderr
        assert "delivered 3 events; 0 deliveries failed" in result.stdout
        assert pending(database) == 0
        barriers = [e["run"]["facets"]["metaservice_barrier"]["barrier"]
                    for e in receiver.events]
        assert barriers == [10, 20, 30], receiver.events


def test_lineage_send_without_openlineage_configured_says_so(database_url: str) -> None:
    result = run_cli("--database-url", database_url, "lineage-send", "--once",
                     env={"OPENLINEAGE_DISABLED": "true"})
    assert result.returncode == 2
    assert "OpenLineage is not configured here" in result.stderr


def test_lineage_send_once_fails_when_the_receiver_is_down(database: Database,
                                                           database_url: str) -> None:
    """A delivery that failed leaves its events in the outbox and ``--once`` exits non-zero."""
    write_events(database, {"nightly": 2})
    result = run_cli("--database-url", database_url, "lineage-send", "--once",
                     env={"OPENLINEAGE_URL": f"http://127.0.0.1:{free_port()}"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "delivered 0 events; 1 deliveries failed" in result.stdout
    assert "some events were not delivered" in result.stderr
    assert pending(database) == 2
