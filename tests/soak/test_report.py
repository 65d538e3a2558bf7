"""The soak's report, from a state directory as the roles and the harness write it: what
passes, what fails a run, and the generated section of docs/reliability.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from metaservice_soak.faults import FaultLog, FaultRecord
from metaservice_soak.harness import SoakConfig, SoakOutcome
from metaservice_soak.report import build, render, update_doc

T0 = 1_800_000_000.0
FINAL_OK = {"rows_ingested": 6, "rows_lost": {"lake.soak.ledger": 0},
            "rows_doubled": {"lake.soak.ledger": 0}, "invariant_at_head": True,
            "strong_at_final": {"lake.soak.orders": True, "lake.soak.ledger": True}, "ok": True}


def write(path: Path, lines: list[dict[str, Any]], *, cut_short: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(line) + "\n" for line in lines)
    path.write_text(text + ('{"t": 1, "kind": "ack' if cut_short else ""))


def a_run(tmp_path: Path, **events: list[dict[str, Any]]) -> SoakOutcome:
    write(tmp_path / "events" / "ingest_plugin.jsonl", [
        {"t": T0 + 1, "kind": "acked", "table": "lake.soak.orders", "ids": [1, 2, 3],
         "barrier": 100},
        {"t": T0 + 30, "kind": "acked", "table": "lake.soak.orders", "ids": [4, 5, 6],
         "barrier": 200}], cut_short=True)
    write(tmp_path / "events" / "join.jsonl", [
        {"t": T0 + 5, "kind": "commit", "table": "lake.soak.ledger", "barrier": 100,
         "snapshot": 11},
        {"t": T0 + 40, "kind": "commit", "table": "lake.soak.ledger", "barrier": 200,
         "snapshot": 12}])
    write(tmp_path / "events" / "reader_duckdb.jsonl", [
        {"t": T0 + 6, "kind": "read", "engine": "duckdb", "ok": True, "barriers": {}}] * 4)
    write(tmp_path / "events" / "reader_head.jsonl", [
        {"t": T0 + 6, "kind": "read", "engine": "duckdb", "ok": False, "detail": "broken"},
        {"t": T0 + 7, "kind": "read", "engine": "duckdb", "ok": True}])
    for role, lines in events.items():
        write(tmp_path / "events" / f"{role}.jsonl", lines)
    log = FaultLog(tmp_path / "faults.jsonl")
    log.write(FaultRecord("database_crash", "postgresql", T0 + 10, T0 + 15, 10.0, {}))
    log.write(FaultRecord("driver_kill", "join", T0 + 20, T0 + 20.1, 20.0, {"pid": 42}))
    write(tmp_path / "holds.jsonl", [
        {"holder_table": "lake.soak.stalled", "job": "stalled", "since_ms": (T0 + 50) * 1000,
         "first_seen": T0 + 51, "last_seen": T0 + 80, "tables": ["lake.soak.orders"]}])
    outcome = SoakOutcome(SoakConfig(minutes=1, seed=3), tmp_path, started=T0 - 50,
                          live=T0, ingest_stopped=T0 + 60, drained=T0 + 90, ended=T0 + 100,
                          final=dict(FINAL_OK), largest_strong_lag_ms=4200,
                          largest_strong_lag_table="lake.soak.ledger")
    outcome.faults_planned = [None, None]  # type: ignore[list-item]
    return outcome


def test_a_clean_run_passes_and_says_what_happened(tmp_path: Path) -> None:
    report = build(a_run(tmp_path, ingest_engine=[
        {"t": T0 + 12, "kind": "http_5xx", "method": "POST", "path": "/x", "status": 503}]))
    assert report.passed, report.problems
    assert report.rows_ingested == 6
    assert report.barriers_by_table == {"lake.soak.ledger": 2, "lake.soak.orders": 2}
    assert report.reads_by_engine == {"duckdb": 4}
    assert (report.head_reads, report.head_breaks) == (2, 1)  # not a violation
    assert report.unavailable_while_down == 1 and report.server_errors == []
    crash, kill = report.faults
    assert crash.recovery_seconds == 20  # the first barrier after T0 + 10 came at T0 + 30
    assert kill.recovery_seconds == 10 and kill.role_recovery_seconds == 20
    (hold,) = report.holds
    assert (hold.job, hold.seconds, hold.tables) == ("stalled", 30, ["lake.soak.orders"])
    text = render(report)
    assert "Result: **passed**" in text and "| invariant violations | 0 |" in text
    assert "| stalled | lake.soak.stalled | 30.0 s | lake.soak.orders |" in text


def test_a_lease_release_in_flight_on_a_killed_replica_is_explained(tmp_path: Path) -> None:
    """haproxy replays no lease release; one in flight on the replica killed under it is its
    502, and only then: the same 502 later, or of another request, fails the run."""
    outcome = a_run(tmp_path, reader_pyiceberg=[
        {"t": T0 + 30.5, "kind": "http_5xx", "method": "DELETE", "path": "/leases/l1",
         "status": 502},
        {"t": T0 + 30.6, "kind": "http_5xx", "method": "POST", "path": "/leases/l2/renew",
         "status": 502},
        {"t": T0 + 40, "kind": "http_5xx", "method": "DELETE", "path": "/leases/l3",
         "status": 502}])
    FaultLog(tmp_path / "faults.jsonl").write(
        FaultRecord("server_kill", "server-2", T0 + 30, T0 + 41, 30.0, {}))
    report = build(outcome)
    assert [e["path"] for e in report.server_errors] == ["/leases/l2/renew", "/leases/l3"]
    assert report.releases_on_killed_replica == 1 and report.unavailable_while_down == 0
    assert "1 × 502 for a lease release in flight on a killed replica" in render(report)


def test_what_fails_a_run(tmp_path: Path) -> None:
    late_503 = {"t": T0 + 26, "kind": "http_5xx", "method": "GET", "path": "/v", "status": 503}
    a_500 = {"t": T0 + 12, "kind": "http_5xx", "method": "GET", "path": "/v", "status": 500}
    broken = {"t": T0 + 8, "kind": "read", "engine": "pyiceberg", "ok": False, "detail": "x"}
    report = build(a_run(tmp_path, reader_pyiceberg=[broken], ingest_engine=[late_503, a_500]))
    assert not report.passed
    assert len(report.violations) == 1 and len(report.server_errors) == 2
    assert report.unavailable_while_down == 0

    outcome = a_run(tmp_path / "lost")
    assert outcome.final is not None
    outcome.final.update(rows_lost={"lake.soak.ledger": 2}, ok=False)
    report = build(outcome)
    assert report.rows_lost == 2 and "2 rows lost" in report.problems


def test_the_generated_section_keeps_the_prose_and_the_other_backend(tmp_path: Path) -> None:
    doc = tmp_path / "reliability.md"
    doc.write_text("# Reliability\n\nProse before.\n")
    report = build(a_run(tmp_path / "run"))
    update_doc(doc, report)
    report.backend = "sqlite"
    update_doc(doc, report)
    report.backend = "postgresql"
    report.seed = 99
    update_doc(doc, report)
    text = doc.read_text()
    assert text.startswith("# Reliability\n\nProse before.\n")
    assert text.count("<!-- soak:postgresql -->") == 1 and "seed 99" in text
    assert "<!-- soak:sqlite -->" in text


def test_a_saved_run_gives_the_same_report(tmp_path: Path) -> None:
    from metaservice_soak.faults import Fault

    outcome = a_run(tmp_path)
    outcome.faults_planned = [Fault(10.0, "database_crash", "postgresql", down_seconds=5.0),
                              Fault(20.0, "driver_kill", "join")]
    outcome.save()
    again = SoakOutcome.load(tmp_path)
    assert again.faults_planned == outcome.faults_planned
    first, second = build(outcome), build(again)
    first.machine = second.machine = {}
    assert render(first) == render(second)


def test_a_patroni_run_reports_each_failover_and_fails_on_a_cut_moving_back(
        tmp_path: Path) -> None:
    outcome = a_run(tmp_path)
    outcome.config.patroni = True
    FaultLog(tmp_path / "faults.jsonl").write(FaultRecord(
        "leader_failover", "kill_leader", T0 + 21, T0 + 45, 21.0,
        {"kind": "kill_leader", "old": "pg1", "new": "pg3", "elected_after": 14.0}))
    outcome.faults_planned = [None, None, None]  # type: ignore[list-item]
    # a 503 while failing over is the database's, as in a crash
    write(tmp_path / "events" / "ingest_engine.jsonl", [
        {"t": T0 + 30, "kind": "http_5xx", "method": "POST", "path": "/x", "status": 503}])
    report = build(outcome)
    assert report.passed, report.problems
    failover = next(f for f in report.faults if f.record.kind == "leader_failover")
    # counted from the fault, found once the new leader was named (T0 + 35): the join's commit
    # at T0 + 40
    assert failover.recovery_seconds == 19
    text = render(report)
    assert "--patroni" in text and "Patroni cluster" in text
    assert "| 3 | 21 s | kill_leader | pg1 | pg3 | 14.0 s | 19.0 s |" in text
    assert "| strong cuts moving backwards | 0 " in text
    update_doc(tmp_path / "reliability.md", report)
    assert "<!-- soak:patroni -->" in (tmp_path / "reliability.md").read_text()

    outcome.strong_backwards = [{"t": T0 + 50, "table": "lake.soak.orders", "barrier": 100,
                                 "after": 200}]
    assert "1 strong cuts moved backwards" in build(outcome).problems


def test_a_503_while_the_object_store_was_down_is_explained(tmp_path: Path) -> None:
    """On S3, a 503 from a store kill's start to ``STORE_GRACE_SECONDS`` after SeaweedFS
    served again is the right answer (``object_store_unavailable``); one later is not. The
    run's block is its own (``sqlite-s3``) and its title says where the lake was."""
    from metaservice_soak.report import STORE_GRACE_SECONDS

    during = {"t": T0 + 52, "kind": "http_5xx", "method": "POST", "path": "/iceberg/x",
              "status": 503}
    late = dict(during, t=T0 + 55 + STORE_GRACE_SECONDS + 1)
    outcome = a_run(tmp_path, ingest_engine=[during, late])
    outcome.config = SoakConfig(minutes=1, seed=3, backend="sqlite", storage="s3")
    FaultLog(tmp_path / "faults.jsonl").write(
        FaultRecord("store_kill", "seaweedfs", T0 + 50, T0 + 55, 50.0, {"pid": 7}))
    report = build(outcome)
    assert [e["t"] for e in report.server_errors] == [late["t"]]
    assert report.unavailable_while_down == 1
    assert report.block == "sqlite-s3" and report.storage == "s3"
    text = render(report)
    assert "the lake on S3 (SeaweedFS, killed and restarted)" in text
    assert "--backend sqlite --storage s3`" in text
