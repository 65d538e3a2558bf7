"""Group commit of root reports (``metaservice/barriers/group_commit.py``): reports that arrive
together are recorded in one transaction, and each gets exactly the answer it would have got
alone, refusals included, with the stored barriers those of one report at a time.

- In process, on both backends: a group of reports to the same and to different tables, some
  refused, some that must be made alone (a new table), against the same reports made one at a
  time, each in its own transaction, on twin tables.
- Two server processes, 16 clients: every answer is the one a sequential model of the contract's
  (docs/contract.md#the-barrier-protocol) rules gives, the stored barriers are the model's, and
  (PostgreSQL) transactions did record several reports, of one table and of several.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from metaservice import errors
from metaservice.barriers import group_commit, service
from metaservice.barriers.service import Completed, RootReport
from metaservice.clock import ManualClock
from metaservice.db.session import Database
from metaservice.names import TableName
from metaservice.schemas import INT64_MAX
from tests.metaservice.barriers.test_barriers import root
from tests.metaservice.jobs.test_jobs import plan
from tests.metaservice.test_replicas import two_servers  # noqa: F401 - a fixture


def _stored(database: Database, schema: str) -> dict[str, dict[int, int]]:
    """Per table of database ``schema`` (``lake.<schema>.*``): its barrier rows, barrier →
    snapshot, with latest(T) checked against them."""
    with database.engine.connect() as conn:
        tables = conn.execute(text(
            "SELECT id, name, latest_barrier, latest_snapshot_id FROM tables "
            "WHERE database = :schema"), {"schema": schema}).all()
        stored: dict[str, dict[int, int]] = {}
        for table_id, name, latest, latest_snapshot in tables:
            rows = dict(conn.execute(text(
                "SELECT barrier, snapshot_id FROM barriers WHERE table_id = :id "
                "AND rolled_back = :no"), {"id": table_id, "no": False}).all())
            stored[name] = rows
            if rows:
                assert latest == max(rows) and latest_snapshot == rows[latest], name
    return stored


def _answer(outcome: Completed | BaseException, schema: str) -> tuple:  # type: ignore[type-arg]
    """An outcome with ``schema`` (the tables' database, in the writer job's name too) left
    out, to compare twins."""
    if isinstance(outcome, errors.MetaServiceError):
        details = {k: v.replace(schema, "*") if isinstance(v, str) else v
                   for k, v in outcome.details.items()}
        return ("refused", outcome.status_code, outcome.code, sorted(details.items()))
    assert isinstance(outcome, Completed), outcome
    return ("ok", outcome.table.replace(f".{schema}.", ".*."), outcome.barrier,
            outcome.snapshot_id)


def test_a_group_answers_each_report_as_one_at_a_time_would(
        app, client: httpx.Client, database: Database, clock: ManualClock,  # type: ignore[no-untyped-def]
        caplog: pytest.LogCaptureFixture) -> None:
    now = clock.now_ms()
    for schema in ("grouped", "alone"):
        for i, table in enumerate(("a", "b", "c")):
            assert root(client, f"lake.{schema}.{table}", 100 + i, 1000).status_code == 200
        plan(client, f"load_{schema}", [], [f"lake.{schema}.w"])
        assert client.post(f"/jobs/load_{schema}/start").status_code == 200

    def reports(schema: str) -> list[RootReport]:
        def r(table: str, snapshot: int, barrier: int | None = None) -> RootReport:
            return RootReport(TableName("lake", schema, table), snapshot, barrier)
        return [
            r("c", 1),                # accepted: barrier now
            r("a", 11),               # accepted
            r("b", 21, 500),          # refused: below latest(b)
            r("a", 12),               # accepted after the first of a: now + 1
            r("new", 31),             # a new table: recorded alone, after the group
            r("a", 13, now),          # refused: that barrier of a holds snapshot 11
            r("a", 11, now),          # an exact repeat of the first of a: its answer again
            r("w", 41),               # refused: w has a running writer
            r("b", 22, INT64_MAX),    # refused: beyond the clock's bound
            r("a", 11),               # refused: 11 is recorded and no longer a's latest
            r("a", 12),               # a heartbeat: a's latest again, at now + 2
            r("c", 2, now + 50),      # accepted, explicit
            r("b", 23, 1000),         # refused: barrier 1000 of b holds snapshot 101
        ]

    grouped = app.state.root_reports.commit_group(reports("grouped"))
    one_at_a_time: list[Completed | BaseException] = []
    for report in reports("alone"):
        try:
            with database.transaction(write=True) as session:
                one_at_a_time.append(service.report_root(
                    session, app.state.context, report.name, snapshot_id=report.snapshot_id,
                    barrier=report.barrier))
        except errors.MetaServiceError as refused:
            one_at_a_time.append(refused)

    assert "root_report_group_failed" not in caplog.text  # recorded as a group, not alone
    assert ([_answer(o, "grouped") for o in grouped]
            == [_answer(o, "alone") for o in one_at_a_time])
    kinds = Counter(a[0] for a in (_answer(o, "grouped") for o in grouped))
    assert kinds == {"ok": 7, "refused": 6}, kinds
    assert _answer(grouped[1], "grouped") == ("ok", "lake.*.a", now, 11)
    assert _answer(grouped[3], "grouped") == ("ok", "lake.*.a", now + 1, 12)
    assert _answer(grouped[10], "grouped") == ("ok", "lake.*.a", now + 2, 12)
    assert _stored(database, "grouped") == _stored(database, "alone")
    if database.dialect == "postgresql":  # the group's rows were written by one transaction
        with database.engine.connect() as conn:
            writers = conn.execute(text(
                "SELECT count(DISTINCT b.xmin::text) FROM barriers b JOIN tables t "
                "ON t.id = b.table_id WHERE t.database = 'grouped' AND t.name IN ('a', 'c') "
                "AND b.barrier >= :now"), {"now": now}).scalar_one()
        assert writers == 1


def test_a_group_whose_held_connection_was_lost_is_answered_alone_and_the_next_groups_reconnect(
        app, client: httpx.Client, database: Database,  # type: ignore[no-untyped-def]
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committer holds its connection between groups (no pool checkout and liveness check
    each): when PostgreSQL ends it, the group that finds out is answered report by report, and
    the groups after it use a new connection."""
    if database.dialect != "postgresql":
        pytest.skip("ending another session's connection needs PostgreSQL")
    monkeypatch.setattr(group_commit, "HOLD_SECONDS", 60.0)  # held however slow the machine
    committer = app.state.root_reports
    assert root(client, "lake.held.a", 1, 1000).status_code == 200
    held = committer._connection  # held for the next group, as under load
    assert held is not None
    with database.engine.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:pid)"),
                     {"pid": held.connection.dbapi_connection.info.backend_pid})
    for snapshot, barrier in ((2, 1001), (3, 1002)):
        answer = root(client, "lake.held.a", snapshot, barrier)
        assert answer.status_code == 200, answer.text
        assert answer.json()["barrier"] == barrier
    assert caplog.text.count("root_report_group_failed") == 1  # the first found out, once
    assert committer._connection is not held
    assert _stored(database, "held") == {"a": {1000: 1, 1001: 2, 1002: 3}}


def test_a_group_that_cannot_get_a_connection_is_answered_alone_and_the_thread_goes_on(
        app, client: httpx.Client, database: Database,  # type: ignore[no-untyped-def]
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database is restarting when a group wants its connection: the group's reports are
    answered one by one (on pool connections), and the committer goes on with the next."""
    asked: list[int] = []
    held_connection = database.held_connection

    def restarting() -> Any:
        asked.append(1)
        if len(asked) == 1:
            raise OperationalError("connect", {}, Exception("the database system is starting up"))
        return held_connection()

    monkeypatch.setattr(database, "held_connection", restarting)
    assert root(client, "lake.restart.a", 1, 1000).status_code == 200
    answer = client.post("/tables/lake/restart/a/barriers",
                         json={"snapshot_id": 2, "barrier": 1001}, timeout=20)
    assert answer.status_code == 200, answer.text
    assert caplog.text.count("root_report_group_failed") == 1 and len(asked) == 2
    assert _stored(database, "restart") == {"a": {1000: 1, 1001: 2}}


def test_a_group_the_committer_cannot_answer_is_refused_and_the_thread_goes_on(
        app, client: httpx.Client, database: Database,  # type: ignore[no-untyped-def]
        monkeypatch: pytest.MonkeyPatch) -> None:
    committer = app.state.root_reports
    commit_group = committer._commit_group

    def broken(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(committer, "_commit_group", commit_group)  # once
        raise RuntimeError("a bug")

    monkeypatch.setattr(committer, "_commit_group", broken)
    refused = client.post("/tables/lake/bug/a/barriers", json={"snapshot_id": 1}, timeout=20)
    assert refused.status_code == 500 and refused.json()["error"]["code"] == "internal_error"
    with httpx.Client(base_url=client.base_url, timeout=20) as again:  # a 500 closes the first
        assert root(again, "lake.bug.a", 1, 1000).status_code == 200


# -- two server processes -----------------------------------------------------------------------

CLIENTS = 16
REPORTS_PER_CLIENT = 60
BUSY = ("t0", "t1", "t2")  # few tables: reports to one table meet in a group
FLOOR = 1000  # every table starts with a barrier here


@dataclass
class Sent:
    table: str
    snapshot: int
    barrier: int | None
    status: int = 0
    answer: dict | None = None  # type: ignore[type-arg]


class SequentialRoots:
    """The rules of docs/contract.md#root-reports for root reports, one report at a time: what each
    answers and the barriers it leaves."""

    def __init__(self, writers: set[str]) -> None:
        self.writers = writers
        self.rows: dict[str, dict[int, int]] = {}

    def report(self, table: str, snapshot: int, barrier: int) -> tuple[int, str]:
        """``(status, code)``; ``code`` is "ok" when it is recorded or an exact repeat."""
        if table in self.writers:
            return 409, "table_has_writer"
        rows = self.rows.setdefault(table, {})
        latest = max(rows) if rows else None
        if barrier in rows:
            return (200, "ok") if rows[barrier] == snapshot else (409, "barrier_regression")
        if latest is not None and barrier <= latest:
            return 409, "barrier_regression"
        if latest is not None and snapshot != rows[latest] and snapshot in rows.values():
            return 409, "barrier_regression"
        rows[barrier] = snapshot
        return 200, "ok"


@pytest.mark.slow
def test_two_processes_group_reports_and_answer_each_its_own(
        two_servers: list[str], database: Database) -> None:  # noqa: F811 - a fixture
    first = httpx.Client(base_url=two_servers[0], timeout=60)
    setup = [Sent(t, 100 + i, FLOOR) for i, t in enumerate((*BUSY, "h"))]
    for s in setup:
        assert root(first, f"lake.g.{s.table}", s.snapshot, s.barrier).status_code == 200
    plan(first, "load", [], ["lake.g.w"])
    assert first.post("/jobs/load/start").status_code == 200
    first.close()

    sent: list[Sent] = []
    lock = threading.Lock()
    gate = threading.Barrier(CLIENTS)

    def client(index: int) -> None:
        rng = random.Random(index)
        mine: list[Sent] = []
        with httpx.Client(base_url=two_servers[index % 2], timeout=60) as http:
            gate.wait()
            for n in range(REPORTS_PER_CLIENT):
                kind = rng.random()
                busy = rng.choice(BUSY)
                if kind < 0.55:  # a new snapshot, barrier assigned: recorded
                    s = Sent(busy, 10_000 * (index + 1) + n, None)
                elif kind < 0.65:  # below the floor: refused
                    s = Sent(busy, 10_000 * (index + 1) + n, FLOOR - 1 - n)
                elif kind < 0.72:  # the setup's report again: an exact repeat
                    s = next(x for x in setup if x.table == busy)
                    s = Sent(s.table, s.snapshot, s.barrier)
                elif kind < 0.79:  # the floor with another snapshot: refused
                    s = Sent(busy, 10_000 * (index + 1) + n, FLOOR)
                elif kind < 0.86:  # a table with a running writer: refused
                    s = Sent("w", 10_000 * (index + 1) + n, None)
                else:  # a heartbeat of h's only snapshot: recorded at a new barrier
                    s = Sent("h", 103, None)
                body: dict[str, int] = {"snapshot_id": s.snapshot}
                if s.barrier is not None:
                    body["barrier"] = s.barrier
                response = http.post(f"/tables/lake/g/{s.table}/barriers", json=body)
                s.status = response.status_code
                s.answer = response.json()
                mine.append(s)
        with lock:
            sent.extend(mine)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(sent) == CLIENTS * REPORTS_PER_CLIENT

    # Each answer is its own report's.
    for s in sent:
        if s.status == 200:
            assert s.answer is not None
            assert (s.answer["table"], s.answer["snapshot_id"]) == (f"lake.g.{s.table}",
                                                                    s.snapshot), s
            if s.barrier is not None:
                assert s.answer["barrier"] == s.barrier, s
        else:
            assert s.answer is not None and "error" in s.answer, s

    # One report at a time: the setup, the recorded reports in barrier order (the order their
    # tables' locks put them in), then the others, whose answers depend on no order.
    model = SequentialRoots({"w"})
    for s in setup:
        assert model.report(s.table, s.snapshot, FLOOR) == (200, "ok")
    assigned = sorted((s for s in sent if s.barrier is None and s.status == 200),
                      key=lambda s: s.answer["barrier"])  # type: ignore[index]
    for s in assigned:
        assert model.report(s.table, s.snapshot, s.answer["barrier"]) == (200, "ok"), s  # type: ignore[index]
    for s in sent:
        if s.barrier is None and s.status == 200:
            continue
        if s.barrier is None:  # refused without a barrier: ask the model at the next one
            rows = model.rows.get(s.table, {})
            expected = model.report(s.table, s.snapshot, max(rows, default=FLOOR) + 1)
            assert expected != (200, "ok"), s
        else:
            expected = model.report(s.table, s.snapshot, s.barrier)
        got = (s.status, "ok" if s.status == 200 else s.answer["error"]["code"])  # type: ignore[index]
        assert got == expected, s
    stored = _stored(database, "g")
    stored.pop("w", None)
    assert stored == model.rows
    codes = Counter((s.status, s.answer.get("error", {}).get("code")) for s in sent)  # type: ignore[union-attr]
    assert codes[(409, "barrier_regression")] > 0 and codes[(409, "table_has_writer")] > 0, codes
    assert codes[(200, None)] > CLIENTS * REPORTS_PER_CLIENT // 2, codes

    if database.dialect == "postgresql":  # groups were formed: rows written by one transaction
        with database.engine.connect() as conn:
            groups = conn.execute(text(
                "SELECT count(*), count(DISTINCT b.table_id) FROM barriers b "
                "JOIN tables t ON t.id = b.table_id WHERE t.database = 'g' "
                "AND b.barrier > :floor GROUP BY b.xmin::text HAVING count(*) > 1"),
                {"floor": FLOOR}).all()
        assert any(tables > 1 for _, tables in groups), groups  # several tables in one group
        assert any(rows > tables for rows, tables in groups), groups  # one table twice
