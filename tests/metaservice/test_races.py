"""Requests racing on the same rows (docs/contract.md#durable-and-race-free-writes): two never both
win, none is lost.

Thirty-two threads, each with its own HTTP connection to the real loopback server, are released
together by a barrier, on both backends. After the races the database itself is checked: no
barrier recorded twice, no regression, every acknowledged commit present.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from metaservice.db.models import BarrierRow, IcebergNamespaceRow, JobRow, TableRow
from metaservice.db.session import Database

pytestmark = pytest.mark.slow  # many threads racing, many rounds

RACERS = 32


@dataclass(frozen=True)
class Call:
    method: str
    url: str
    json: dict[str, Any] | None = None


class Racers:
    """``RACERS`` clients with their own connections, released together by a barrier."""

    def __init__(self, base_url: str) -> None:
        # Plain HTTP over loopback: no TLS context to build for each client.
        self.clients = [httpx.Client(base_url=base_url, timeout=60, verify=False)
                        for _ in range(RACERS)]

    def close(self) -> None:
        for c in self.clients:
            c.close()

    def race(self, calls: list[Call]) -> list[httpx.Response]:
        """Send ``calls`` at once, one thread and one connection each; answers in call order."""
        assert len(calls) <= len(self.clients)
        start = threading.Barrier(len(calls))
        answers: list[httpx.Response | BaseException | None] = [None] * len(calls)

        def run(i: int) -> None:
            http = self.clients[i]
            try:
                http.get("/healthz").raise_for_status()  # connected before the start
                start.wait(timeout=60)
                answers[i] = http.request(calls[i].method, calls[i].url, json=calls[i].json)
            except BaseException as exc:  # noqa: BLE001 - reported below
                answers[i] = exc

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        for a in answers:
            if not isinstance(a, httpx.Response):
                raise AssertionError(f"a racer failed: {a!r}")
        return answers  # type: ignore[return-value]


def code(response: httpx.Response) -> str:
    return "ok" if response.status_code == 200 else response.json()["error"]["code"]


def only(codes: Counter[str], allowed: set[str]) -> None:
    assert set(codes) <= allowed, codes


class Ledger:
    """Every commit the service acknowledged, to find in the database afterwards."""

    def __init__(self) -> None:
        self.acknowledged: set[tuple[str, int, int]] = set()

    def note(self, responses: list[httpx.Response]) -> None:
        for r in responses:
            if r.status_code == 200:
                body = r.json()
                self.acknowledged.add((body["table"], body["barrier"], body["snapshot_id"]))

    def check(self, database: Database) -> None:
        """No duplicate, no regression, no lost write (docs/contract.md#barriers-only-move-forward,
        docs/contract.md#durable-and-race-free-writes)."""
        with database.engine.connect() as conn:
            tables = {r.id: r for r in conn.execute(select(TableRow))}
            rows = conn.execute(select(BarrierRow)).all()
        recorded: dict[str, list[Any]] = {}
        for row in rows:
            t = tables[row.table_id]
            recorded.setdefault(f"{t.catalog}.{t.database}.{t.name}", []).append(row)
        found = {(name, r.barrier, r.snapshot_id) for name, rs in recorded.items() for r in rs}
        assert self.acknowledged <= found, self.acknowledged - found
        for table_id, t in tables.items():
            mine = [r for r in rows if r.table_id == table_id]
            barriers = [r.barrier for r in mine]
            assert len(barriers) == len(set(barriers)), (t.name, "a barrier recorded twice")
            if mine:
                assert t.latest_barrier == max(barriers), (t.name, "latest is not the greatest")
                latest = next(r for r in mine if r.barrier == t.latest_barrier)
                assert t.latest_snapshot_id == latest.snapshot_id, t.name
            # A snapshot completes several barriers only as heartbeats, which never interleave
            # with other snapshots.
            by_barrier = sorted(mine, key=lambda r: r.barrier)
            seen: set[int] = set()
            for before, after in zip(by_barrier, by_barrier[1:], strict=False):
                if after.snapshot_id != before.snapshot_id:
                    seen.add(before.snapshot_id)
                    assert after.snapshot_id not in seen, (t.name, "snapshot recorded again")
            for a in mine:
                for b in mine:
                    assert not (a.committed_at < b.committed_at and a.barrier > b.barrier), \
                        (t.name, "completed barriers went backwards")


@pytest.fixture
def racers(client: httpx.Client) -> Iterator[Racers]:
    racers = Racers(str(client.base_url))
    yield racers
    racers.close()


@pytest.fixture
def ledger(database: Database) -> Iterator[Ledger]:
    ledger = Ledger()
    yield ledger
    ledger.check(database)


def root_report(table: str, snapshot: int, barrier: int | None = None) -> Call:
    body: dict[str, Any] = {"snapshot_id": snapshot}
    if barrier is not None:
        body["barrier"] = barrier
    return Call("POST", f"/tables/{table.replace('.', '/')}/barriers", body)


def plan(client: httpx.Client, job: str, sources: list[str], sinks: list[str]) -> None:
    for role, tables in (("source", sources), ("sink", sinks)):
        for t in tables:
            r = client.post(f"/register/{role}/{job}/{t.replace('.', '/')}")
            assert r.status_code == 200, r.text


# -- one table's root commit -------------------------------------------------------------------


def test_one_barrier_different_snapshots_exactly_one_wins(
        racers: Racers, ledger: Ledger, client: httpx.Client) -> None:
    for round_, barrier in enumerate([100, 200, 300]):
        # Round 0 also races on creating the table row.
        answers = racers.race([root_report("lake.db.r", 1000 * round_ + i, barrier)
                                  for i in range(RACERS)])
        ledger.note(answers)
        codes = Counter(map(code, answers))
        assert codes == {"ok": 1, "barrier_regression": RACERS - 1}, codes
        winner = next(r.json() for r in answers if r.status_code == 200)
        latest = client.get("/version/weak/lake/db/r").json()
        assert (latest["barrier"], latest["snapshot_id"]) == (barrier, winner["snapshot_id"])


def test_one_barrier_same_snapshot_all_get_the_first_answer(
        racers: Racers, ledger: Ledger) -> None:
    for barrier, snapshot in [(100, 7), (200, 8), (300, 8)]:  # the last one is a heartbeat
        answers = racers.race([root_report("lake.db.r", snapshot, barrier)] * RACERS)
        ledger.note(answers)
        assert {r.status_code for r in answers} == {200}, [r.text for r in answers]
        assert {r.text for r in answers} == {
            f'{{"table":"lake.db.r","barrier":{barrier},"snapshot_id":{snapshot}}}'}


def test_assigned_barriers_are_distinct_and_none_is_lost(
        racers: Racers, ledger: Ledger, database: Database) -> None:
    answers = racers.race([root_report("lake.db.r", i + 1) for i in range(RACERS)])
    ledger.note(answers)
    assert {r.status_code for r in answers} == {200}, [r.text for r in answers]
    barriers = [r.json()["barrier"] for r in answers]
    assert len(set(barriers)) == RACERS
    # In commit order the barriers increase: the later a report, the greater its barrier.
    with database.engine.connect() as conn:
        rows = conn.execute(select(BarrierRow.barrier)).scalars().all()
    assert sorted(rows) == sorted(barriers)


# -- one job's pinned barrier -------------------------------------------------------------------


def test_concurrent_next_and_commit_of_one_pinned_barrier(
        racers: Racers, ledger: Ledger, client: httpx.Client, database: Database) -> None:
    plan(client, "etl", ["lake.db.a", "lake.db.c"], ["lake.db.b"])
    for table in ("lake.db.a", "lake.db.c"):
        assert client.post(f"/tables/{table.replace('.', '/')}/barriers",
                           json={"snapshot_id": 1, "barrier": 10}).status_code == 200
    start = client.post("/jobs/etl/start").json()
    assert start["barrier"] == 10
    ledger.note([client.post("/commit/etl/lake/db/b", json={"barrier": 10, "snapshot_id": 100})])
    for step, barrier in enumerate([20, 30, 40, 50], start=1):
        for table in ("lake.db.a", "lake.db.c"):
            r = client.post(f"/tables/{table.replace('.', '/')}/barriers",
                            json={"snapshot_id": 1 + step, "barrier": barrier})
            assert r.status_code == 200, r.text
        nexts = racers.race([Call("POST", "/jobs/etl/barriers/next",
                                     {"after": barrier - 10})] * RACERS)
        assert {r.status_code for r in nexts} == {200}, [r.text for r in nexts]
        assert len({r.text for r in nexts}) == 1, {r.text for r in nexts}
        assert nexts[0].json()["barrier"] == barrier
        if step % 2:  # the same snapshot: every report is acknowledged, one row
            commits = racers.race([Call("POST", "/commit/etl/lake/db/b",
                                           {"barrier": barrier, "snapshot_id": 100 + step})]
                           * RACERS)
            assert {r.status_code for r in commits} == {200}, [r.text for r in commits]
            assert len({r.text for r in commits}) == 1
        else:  # different snapshots: one wins
            commits = racers.race([Call("POST", "/commit/etl/lake/db/b",
                                           {"barrier": barrier, "snapshot_id": 1000 * step + i})
                                      for i in range(RACERS)])
            codes = Counter(map(code, commits))
            assert codes == {"ok": 1, "barrier_regression": RACERS - 1}, codes
        ledger.note(commits)
        job = client.get("/jobs/etl").json()
        assert job["last_committed_barrier"] == barrier and job["pinned_barrier"] is None
    with database.engine.connect() as conn:
        progress = conn.execute(select(JobRow.last_committed_barrier)).scalars().all()
    assert progress == [50]


def test_commits_racing_with_next_and_abort_never_lose_an_acknowledged_commit(
        racers: Racers, ledger: Ledger, client: httpx.Client) -> None:
    """A mixed crowd: some ask for the barrier, some abort it, some commit it."""
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    client.post("/tables/lake/db/a/barriers", json={"snapshot_id": 1, "barrier": 10})
    client.post("/jobs/etl/start")
    for step in range(1, 6):
        barrier = 10 * step
        if step > 1:
            client.post("/tables/lake/db/a/barriers",
                        json={"snapshot_id": step, "barrier": barrier})
            assert client.post("/jobs/etl/barriers/next", json={}).json()["barrier"] == barrier
        calls: list[Call] = []
        for i in range(RACERS):
            kind = i % 4
            if kind == 0:
                calls.append(Call("POST", "/jobs/etl/barriers/next", {}))
            elif kind == 1:
                calls.append(Call("POST", f"/jobs/etl/barriers/{barrier}/abort",
                                  {"reason": "race"}))
            else:
                calls.append(Call("POST", "/commit/etl/lake/db/b",
                                  {"barrier": barrier, "snapshot_id": 100 * step + i % 2}))
        answers = racers.race(calls)
        commits = [a for c, a in zip(calls, answers, strict=True) if "/commit/" in c.url]
        ledger.note(commits)
        only(Counter(map(code, answers)), {"ok", "barrier_regression", "unknown_barrier"})
        # Whatever happened, the job can finish the barrier.
        while client.get("/jobs/etl").json()["last_committed_barrier"] != barrier:
            position = client.post("/jobs/etl/barriers/next", json={}).json()
            assert position["action"] == "process" and position["barrier"] == barrier, position
            r = client.post("/commit/etl/lake/db/b",
                            json={"barrier": barrier, "snapshot_id": 100 * step})
            assert r.status_code == 200, r.text
            ledger.note([r])


# -- two jobs, one sink ----------------------------------------------------------------------------


def test_two_jobs_racing_to_start_with_the_same_sink(
        racers: Racers, ledger: Ledger, client: httpx.Client) -> None:
    client.post("/tables/lake/db/src/barriers", json={"snapshot_id": 1, "barrier": 10})
    for round_ in range(20):
        for job in ("left", "right"):
            plan(client, job, ["lake.db.src"], ["lake.db.sink"])
        calls = [Call("POST", f"/jobs/{'left' if i % 2 else 'right'}/start", {"from": "latest"})
                 for i in range(RACERS)]
        answers = racers.race(calls)
        by_job: dict[str, Counter[str]] = {"left": Counter(), "right": Counter()}
        for call, answer in zip(calls, answers, strict=True):
            by_job[call.url.split("/")[2]][code(answer)] += 1
        winners = [job for job, codes in by_job.items() if codes["ok"]]
        assert len(winners) == 1, (round_, by_job)
        winner, loser = winners[0], ({"left", "right"} - set(winners)).pop()
        assert by_job[winner] == {"ok": RACERS // 2}, by_job
        assert by_job[loser] == {"table_has_writer": RACERS // 2}, by_job
        running = client.get("/jobs", params={"state": "running"}).json()["jobs"]
        assert [j["job"] for j in running] == [winner]
        assert client.get("/jobs/" + loser).json()["state"] == "planned"
        # Every winning answer is the same pinned start position.
        assert len({a.text for c, a in zip(calls, answers, strict=True)
                    if winner in c.url}) == 1
        commit = client.post(f"/commit/{winner}/lake/db/sink",
                             json={"barrier": 10 + round_, "snapshot_id": 500 + round_})
        assert commit.status_code == 200, commit.text
        ledger.note([commit])
        for job in ("left", "right"):
            assert client.post(f"/unregister/{job}").status_code == 200
        client.post("/tables/lake/db/src/barriers",
                    json={"snapshot_id": 2 + round_, "barrier": 11 + round_})


def test_concurrent_registrations_and_starts_leave_one_writer_and_no_cycle(
        racers: Racers, client: httpx.Client) -> None:
    """Jobs that would close a cycle race to start: at most one of each conflicting pair runs."""
    client.post("/tables/lake/db/t1/barriers", json={"snapshot_id": 1, "barrier": 10})
    client.post("/tables/lake/db/t2/barriers", json={"snapshot_id": 2, "barrier": 10})
    for round_ in range(10):
        plan(client, "forward", ["lake.db.t1"], ["lake.db.t2"])
        plan(client, "backward", ["lake.db.t2"], ["lake.db.t1"])
        calls = [Call("POST", f"/jobs/{'forward' if i % 2 else 'backward'}/start")
                 for i in range(RACERS)]
        answers = racers.race(calls)
        only(Counter(map(code, answers)), {"ok", "cycle"})
        running = [j["job"] for j in
                   client.get("/jobs", params={"state": "running"}).json()["jobs"]]
        assert len(running) == 1, (round_, running)
        for job in ("forward", "backward"):
            client.post(f"/unregister/{job}")



# -- the catalog's nested namespaces -----------------------------------------------------------


def test_a_parent_namespace_dropped_while_children_are_created_leaves_no_orphan(
        racers: Racers, client: httpx.Client, database: Database) -> None:
    """Either the drop wins (every child's create is 404, the parent is gone) or a child does
    (the drop is 409 NamespaceNotEmpty): never a child without its parent."""
    for round_ in range(12):
        parent = f"p{round_}"
        assert client.post("/iceberg/v1/namespaces",
                           json={"namespace": [parent]}).status_code == 200
        calls = [Call("DELETE", f"/iceberg/v1/namespaces/{parent}") if i % 8 == 0 else
                 Call("POST", "/iceberg/v1/namespaces", {"namespace": [parent, f"c{i}"]})
                 for i in range(RACERS)]
        answers = racers.race(calls)
        drops = Counter(a.status_code for c, a in zip(calls, answers, strict=True)
                        if c.method == "DELETE")
        creates = Counter(a.status_code for c, a in zip(calls, answers, strict=True)
                          if c.method == "POST")
        assert set(drops) <= {204, 404, 409} and set(creates) <= {200, 404}, (drops, creates)
        assert drops[204] <= 1, drops
        if drops[204]:
            assert creates[200] == 0, (round_, drops, creates)
        else:
            assert creates[200] == RACERS - len(list(drops.elements())), (drops, creates)
        with database.engine.connect() as conn:
            names = set(conn.execute(select(IcebergNamespaceRow.name)).scalars())
        orphans = {n for n in names if "\x1f" in n and n.rsplit("\x1f", 1)[0] not in names}
        assert not orphans, (round_, orphans)
