"""The barrier protocol and the consistent versions against a reference model (SPEC §3–§5).

Hypothesis drives random pipelines through the real HTTP API of a real loopback server: roots
report snapshots and heartbeats, jobs with 0–3 sources are planned (chains, diamonds, and now
and then a cycle or a second writer, which must be refused), started from latest, earliest or
an explicit barrier, step through next/commit, abort, and stop. Every answer — of the protocol
and of every strong, weak and explicit-barrier read — is compared with a small model written
here from the SPEC and ``docs/decisions.md``, independently of the server's code (plain dicts,
no import of ``metaservice``'s rules). After every step the database is checked against the
model and against SPEC §3: per table, completed barriers strictly increase in commit order; at
most one running writer per table; the running topology has no cycle; strong answers never move
backwards.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import select, text

from metaservice.clock import ManualClock
from metaservice.db.models import BarrierRow, JobRow, JobTableRow, TableRow
from metaservice.db.session import Database
from tests.conftest import wipe

TABLES = [f"lake.db.t{i}" for i in range(5)]
JOBS = ["j0", "j1", "j2"]
START_MS = 1_000
_topology_versions = itertools.count(1_000_000, 1_000_000)


# -- the reference model ----------------------------------------------------------------------


class Refused(Exception):
    """The answer the model expects is an error."""

    def __init__(self, status: int, code: str, tables: list[str] | None = None) -> None:
        super().__init__(f"{status} {code}")
        self.status, self.code, self.tables = status, code, tables


@dataclass
class Row:
    snapshot: int
    writer: str | None
    run: int | None


@dataclass
class Table:
    rows: dict[int, Row] = field(default_factory=dict)  # barrier -> row
    order: list[int] = field(default_factory=list)  # barriers in commit order
    catching_up: bool = False

    @property
    def latest(self) -> int | None:
        return self.order[-1] if self.order else None

    @property
    def latest_snapshot(self) -> int | None:
        return self.rows[self.order[-1]].snapshot if self.order else None

    def snap(self, barrier: int) -> tuple[int, int] | None:
        """(barrier, snapshot) completing the greatest barrier <= ``barrier``."""
        below = [b for b in self.rows if b <= barrier]
        if not below:
            return None
        b = max(below)
        return b, self.rows[b].snapshot


@dataclass
class Pin:
    barrier: int
    snapshots: dict[str, int]
    previous: dict[str, int]


@dataclass
class Job:
    state: str = "planned"
    sources: set[str] = field(default_factory=set)
    sinks: set[str] = field(default_factory=set)
    run: int = 0
    pin: Pin | None = None
    last_committed: int | None = None
    progress: dict[tuple[int, int], list[Any]] = field(default_factory=dict)  # [state, attempts]


@dataclass
class Model:
    tables: dict[str, Table] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)

    # -- topology --------------------------------------------------------------------------

    def running(self) -> dict[str, tuple[set[str], set[str]]]:
        return {n: (j.sources, j.sinks) for n, j in self.jobs.items() if j.state == "running"}

    def writer_of(self, table: str) -> str | None:
        writers = [n for n, (_, sinks) in self.running().items() if table in sinks]
        assert len(writers) <= 1
        return writers[0] if writers else None

    @staticmethod
    def components(edges: dict[str, tuple[set[str], set[str]]]) -> dict[str, frozenset[str]]:
        groups: list[set[str]] = []
        for sources, sinks in edges.values():
            members = set(sources | sinks)
            for g in [g for g in groups if g & members]:
                groups.remove(g)
                members |= g
            groups.append(members)
        return {t: frozenset(g) for g in groups for t in g}

    @staticmethod
    def has_cycle(edges: dict[str, tuple[set[str], set[str]]]) -> bool:
        succ: dict[str, set[str]] = {}
        for sources, sinks in edges.values():
            for s in sources:
                succ.setdefault(s, set()).update(sinks)
        done: set[str] = set()

        def reaches_itself(start: str) -> bool:
            stack, seen = list(succ.get(start, ())), set()
            while stack:
                t = stack.pop()
                if t == start:
                    return True
                if t not in seen:
                    seen.add(t)
                    stack.extend(succ.get(t, ()))
            return False

        for t in list(succ):
            if t not in done and reaches_itself(t):
                return True
            done.add(t)
        return False

    def component_of(self, table: str) -> frozenset[str]:
        return self.components(self.running()).get(table, frozenset({table}))

    def strong_cut(self, members: frozenset[str] | set[str],
                   flags: dict[str, bool] | None = None) -> int | None:
        """min latest over the caught-up tables (``flags``: catching-up flags to use)."""
        latests = [self.tables[t].latest for t in members
                   if t in self.tables and self.tables[t].latest is not None
                   and not (flags[t] if flags is not None else self.tables[t].catching_up)]
        return min(latests) if latests else None  # type: ignore[type-var]

    def refresh_catching_up(self, before: dict[str, tuple[set[str], set[str]]],
                            touched: set[str]) -> None:
        """A job started or stopped: every table of a changed component behind the strong cut
        its old component(s) could serve (the greatest of them), or with no barrier, is
        catching up; the others, when such a cut exists, are not."""
        old_of = self.components(before)
        new_of = self.components(self.running())
        flags = {t: tbl.catching_up for t, tbl in self.tables.items()}
        for component in {new_of.get(t, frozenset({t})) for t in touched}:
            cuts = [self.strong_cut(old_of.get(t, frozenset({t})), flags) for t in component]
            known = [c for c in cuts if c is not None]
            floor = max(known) if known else None
            for t in component:
                latest = self.tables[t].latest
                if latest is None or (floor is not None and latest < floor):
                    self.tables[t].catching_up = True
                elif floor is not None:
                    self.tables[t].catching_up = False

    # -- recording ---------------------------------------------------------------------------

    def table(self, name: str) -> Table:
        return self.tables.setdefault(name, Table())

    def record(self, name: str, barrier: int, snapshot: int, writer: str | None,
               run: int | None) -> tuple[int, int]:
        t = self.table(name)
        if barrier in t.rows:
            if t.rows[barrier].snapshot == snapshot:
                return barrier, snapshot  # exact repeat
            raise Refused(409, "barrier_regression")
        if t.latest is not None and barrier <= t.latest:
            raise Refused(409, "barrier_regression")
        if snapshot != t.latest_snapshot and any(r.snapshot == snapshot for r in t.rows.values()):
            raise Refused(409, "barrier_regression")  # only the latest may heartbeat
        t.rows[barrier] = Row(snapshot, writer, run)
        t.order.append(barrier)
        if t.catching_up:
            rest = self.component_of(name) - {name}
            cut = self.strong_cut(rest)
            if cut is None or barrier >= cut:
                t.catching_up = False
        return barrier, snapshot

    def assigned(self, name: str, now: int) -> int:
        latest = self.table(name).latest
        return now if latest is None else max(now, latest + 1)

    def root_report(self, name: str, snapshot: int, barrier: int | None,
                    now: int) -> dict[str, Any]:
        self.table(name)
        if self.writer_of(name) is not None:
            raise Refused(409, "table_has_writer")
        if barrier is None:
            barrier = self.assigned(name, now)
        b, s = self.record(name, barrier, snapshot, None, None)
        return {"table": name, "barrier": b, "snapshot_id": s}

    # -- jobs ------------------------------------------------------------------------------

    def register(self, name: str, role: str, table: str) -> dict[str, Any]:
        job = self.jobs.setdefault(name, Job())
        self.table(table)
        if job.state == "terminated":
            job.state, job.sources, job.sinks, job.last_committed = "planned", set(), set(), None
        edges = job.sources if role == "source" else job.sinks
        if table not in edges:
            if job.state == "running":
                raise Refused(409, "job_not_planned")
            edges.add(table)
            running = self.running()
            running[name] = (job.sources, job.sinks)
            if self.has_cycle(running):
                raise Refused(409, "cycle")
        return {"job": name, "state": job.state, "sources": sorted(job.sources),
                "sinks": sorted(job.sinks)}

    def start(self, name: str, start_from: str | int) -> dict[str, Any]:
        job = self.jobs.get(name)
        if job is None:
            raise Refused(404, "unknown_job")
        if job.state == "running":
            if job.pin is not None:
                return self.position(job)
            if job.last_committed is not None and start_from in ("latest", "earliest"):
                # A driver restarted mid-run continues where the run is, like ``next``; an
                # explicit barrier is pinned as asked.
                return self.next(name, None)
            return self.start_position(name, job, start_from)
        if job.state == "terminated":
            raise Refused(409, "job_not_planned")
        for sink in job.sinks:
            writer = self.writer_of(sink)
            if writer is not None and writer != name:
                raise Refused(409, "table_has_writer")
        before = self.running()
        after = dict(before)
        after[name] = (job.sources, job.sinks)
        if self.has_cycle(after):
            raise Refused(409, "cycle")
        job.state, job.run, job.last_committed = "running", job.run + 1, None
        self.refresh_catching_up(before, job.sources | job.sinks)
        return {"run": job.run, "state": "running", **self.start_position(name, job, start_from)}

    def start_position(self, name: str, job: Job, start_from: str | int) -> dict[str, Any]:
        if not job.sources:
            return {"action": "none"}
        latests = [self.tables[s].latest for s in job.sources]
        if start_from == "latest":
            if any(b is None for b in latests):
                return {"action": "wait"}
            return self.pin(job, min(latests), None)  # type: ignore[type-var]
        if start_from == "earliest":
            firsts = [min(self.tables[s].rows, default=None) for s in job.sources]
            if any(f is None for f in firsts):
                return {"action": "wait"}
            if max(firsts) > min(latests):  # type: ignore[type-var]
                return {"action": "wait"}  # not complete in every source yet
            return self.pin(job, max(firsts), None)  # type: ignore[type-var]
        assert isinstance(start_from, int)
        behind = sorted(s for s in job.sources
                        if self.tables[s].latest is None or self.tables[s].latest < start_from)
        if behind:
            raise Refused(409, "barrier_not_complete", behind)
        position = self.pin(job, start_from, None)
        if position["action"] != "process":
            raise Refused(404, "no_version")
        return position

    def pin(self, job: Job, barrier: int, after: int | None) -> dict[str, Any]:
        snaps = {s: self.tables[s].snap(barrier) for s in job.sources}
        if any(v is None for v in snaps.values()):
            return {"action": "wait"}
        previous: dict[str, int] = {}
        if after is not None:
            for s in job.sources:
                at = self.tables[s].snap(after)
                if at is not None:
                    previous[s] = at[1]
        job.pin = Pin(barrier, {s: v[1] for s, v in snaps.items() if v}, previous)
        record = job.progress.setdefault((job.run, barrier), ["in_progress", 0])
        record[0], record[1] = "in_progress", record[1] + 1
        return self.position(job)

    @staticmethod
    def position(job: Job) -> dict[str, Any]:
        assert job.pin is not None
        return {"action": "process", "barrier": job.pin.barrier,
                "snapshots": job.pin.snapshots, "previous": job.pin.previous}

    def running_job(self, name: str) -> Job:
        job = self.jobs.get(name)
        if job is None:
            raise Refused(404, "unknown_job")
        if job.state != "running":
            raise Refused(409, "job_not_running")
        return job

    def next(self, name: str, after: int | None) -> dict[str, Any]:
        job = self.running_job(name)
        if job.pin is not None:
            return self.position(job)
        if not job.sources:
            return {"action": "none"}
        latests = [self.tables[s].latest for s in job.sources]
        if any(b is None for b in latests):
            return {"action": "wait"}
        candidates = [b for b in (after, job.last_committed) if b is not None]
        effective_after = max(candidates) if candidates else None
        barrier = min(latests)  # type: ignore[type-var]
        if effective_after is not None and barrier <= effective_after:
            return {"action": "wait"}
        return self.pin(job, barrier, effective_after)

    def commit(self, name: str, table: str, barrier: int | None, snapshot: int,
               now: int) -> dict[str, Any]:
        job = self.jobs.get(name)
        if job is None:
            raise Refused(404, "unknown_job")
        if table not in job.sinks:
            raise Refused(409, "not_a_sink")
        t = self.tables[table]
        answer = {"table": table, "barrier": barrier, "snapshot_id": snapshot}
        if barrier is not None and barrier in t.rows:
            row = t.rows[barrier]
            if row.snapshot == snapshot and row.writer == name:
                # An exact repeat (a report retried after a crash, or a replay by a restarted
                # run that found its Iceberg commit): idempotent, and it counts for the pin.
                if job.state == "running" and job.pin is not None and job.pin.barrier == barrier:
                    self.complete_if_all_sinks(name, job, barrier)
                return answer
        if job.state != "running":
            raise Refused(409, "job_not_running")
        if job.sources:
            if barrier is None:
                raise Refused(422, "invalid_request")
            if t.latest is not None and barrier <= t.latest:
                raise Refused(409, "barrier_regression")
            if job.pin is None or job.pin.barrier != barrier:
                raise Refused(409, "unknown_barrier")
        elif barrier is None:
            barrier = self.assigned(table, now)
        b, s = self.record(table, barrier, snapshot, name, job.run)
        if job.sources:
            self.complete_if_all_sinks(name, job, barrier)
        elif job.last_committed is None or barrier > job.last_committed:
            job.last_committed = barrier
        return {"table": table, "barrier": b, "snapshot_id": s}

    def complete_if_all_sinks(self, name: str, job: Job, barrier: int) -> None:
        """B is complete for the job once each sink holds a snapshot of B written by it."""
        if all(barrier in self.tables[k].rows and self.tables[k].rows[barrier].writer == name
               for k in job.sinks):
            job.progress[(job.run, barrier)][0] = "committed"
            job.last_committed, job.pin = barrier, None

    def abort(self, name: str, barrier: int) -> dict[str, Any]:
        job = self.running_job(name)
        record = job.progress.get((job.run, barrier))
        if job.pin is not None and job.pin.barrier == barrier:
            job.pin = None
            assert record is not None
            record[0] = "aborted"
            return {"job": name, "barrier": barrier, "attempts": record[1]}
        if record is not None and record[0] in ("aborted", "invalidated"):
            return {"job": name, "barrier": barrier, "attempts": record[1]}
        raise Refused(409, "unknown_barrier")

    def unregister(self, name: str) -> dict[str, Any]:
        job = self.jobs.get(name)
        if job is None:
            raise Refused(404, "unknown_job")
        if job.state != "terminated":
            before = self.running()
            was_running = job.state == "running"
            if job.pin is not None:
                record = job.progress[(job.run, job.pin.barrier)]
                if record[0] == "in_progress":
                    record[0] = "aborted"
            job.pin, job.state = None, "terminated"
            if was_running:
                self.refresh_catching_up(before, job.sources | job.sinks)
        return {"job": name, "state": "terminated"}

    # -- versions --------------------------------------------------------------------------

    def versions(self, names: list[str], consistency: str,
                 barrier: int | None = None) -> dict[str, tuple[int, int]]:
        names = list(dict.fromkeys(names))
        latest = {n: self.tables[n].latest if n in self.tables else None for n in names}
        if barrier is not None:
            behind = sorted(n for n in names if latest[n] is None or latest[n] < barrier)
            if behind:
                raise Refused(409, "barrier_not_complete", behind)
            cuts = {n: barrier for n in names}
        else:
            if any(latest[n] is None for n in names):
                raise Refused(404, "no_version")
            components: dict[frozenset[str], list[str]] = {}
            for n in names:
                components.setdefault(self.component_of(n), []).append(n)
            cuts = {}
            if consistency == "weak":
                for members in components.values():
                    cut = min(latest[n] for n in members)  # type: ignore[type-var]
                    cuts.update({n: cut for n in members})
            else:
                if any(self.tables[n].catching_up for n in names):
                    raise Refused(404, "catching_up")
                for component, members in components.items():
                    cut = self.strong_cut(component)
                    assert cut is not None
                    cuts.update({n: cut for n in members})
        result = {}
        for n in names:
            at = self.tables[n].snap(cuts[n])
            if at is None:
                raise Refused(404, "no_version")
            result[n] = at
        return result


# -- the state machine ------------------------------------------------------------------------


@dataclass
class Harness:
    client: httpx.Client
    clock: ManualClock
    database: Database


def path(table: str) -> str:
    return table.replace(".", "/")


class ProtocolMachine(RuleBasedStateMachine):
    """Each rule calls the server and checks its answer against the model (``expect``)."""

    def __init__(self, harness: Harness) -> None:
        super().__init__()
        self.http = harness.client
        self.clock = harness.clock
        self.database = harness.database
        self.model = Model()
        self.snapshot_ids = itertools.count(1)
        self.served_strong: dict[str, int] = {}
        wipe(self.database)
        # A topology version never used before: the server's topology cache, filled during an
        # earlier example, must not match it.
        with self.database.engine.begin() as conn:
            conn.execute(text("UPDATE topology_state SET version = :v"),
                         {"v": next(_topology_versions)})
        self.clock.set(START_MS)

    @initialize(data=st.data())
    def pipeline(self, data: st.DataObject) -> None:
        """Every example starts from a pipeline: a few planned jobs, barriers on most of their
        roots, most jobs started."""
        for _ in range(data.draw(st.integers(1, 3))):
            self.plan_job(data)
        sinks = {t for j in self.model.jobs.values() for t in j.sinks}
        for table in TABLES:
            if table not in sinks and data.draw(st.integers(0, 3)):
                for _ in range(data.draw(st.integers(1, 2))):
                    self.report_root(data, table)
        for job in self.jobs_in("planned"):
            if data.draw(st.integers(0, 3)):
                self.start_job(job, data.draw(st.sampled_from(["latest", "earliest"])))

    # -- comparing an answer with the model ----------------------------------------------------

    def expect(self, what: str, response: httpx.Response, change) -> dict[str, Any] | None:  # type: ignore[no-untyped-def]
        """Apply ``change`` to a copy of the model, kept only if it succeeds (like the server's
        transaction), and check that the server answered what the model says."""
        trial = copy.deepcopy(self.model)
        try:
            expected = change(trial)
        except Refused as refused:
            assert response.status_code == refused.status, (what, response.text, refused)
            error = response.json()["error"]
            assert error["code"] == refused.code, (what, response.text, refused)
            if refused.tables is not None:
                assert error["details"]["tables"] == refused.tables, (what, response.text)
            return None
        assert response.status_code == 200, (what, response.text, expected)
        body = response.json()
        for key, value in expected.items():
            assert body.get(key) == value, (what, key, body, expected)
        self.model = trial
        return body

    # -- choosing arguments ----------------------------------------------------------------------

    def jobs_in(self, *states: str) -> list[str]:
        return sorted(n for n, j in self.model.jobs.items() if j.state in states)

    def some_job(self, data: st.DataObject) -> str:
        """Mostly a running job, sometimes any."""
        running = self.jobs_in("running")
        if running and data.draw(st.integers(0, 3)):
            return data.draw(st.sampled_from(running))
        return data.draw(st.sampled_from(sorted(self.model.jobs)))

    def fresh_snapshot(self) -> int:
        return next(self.snapshot_ids) * 1_000_003

    def snapshot_choice(self, data: st.DataObject, table: str, barrier: int | None) -> int:
        """Fresh, the latest (a heartbeat), an older one, or the one recorded at ``barrier``."""
        t = self.model.tables.get(table)
        choices = ["fresh", "fresh"]
        if t is not None and t.order:
            choices += ["latest", "older"]
            if barrier in t.rows:
                choices.append("at_barrier")
        choice = data.draw(st.sampled_from(choices))
        if choice == "latest":
            return t.latest_snapshot  # type: ignore[union-attr,return-value]
        if choice == "older":
            return data.draw(st.sampled_from([r.snapshot for r in t.rows.values()]))  # type: ignore[union-attr]
        if choice == "at_barrier":
            return t.rows[barrier].snapshot  # type: ignore[union-attr,index]
        return self.fresh_snapshot()

    def known_barriers(self) -> list[int]:
        return sorted({b for t in self.model.tables.values() for b in t.rows})

    def barrier_choice(self, data: st.DataObject) -> int:
        known = self.known_barriers()
        if known and data.draw(st.booleans()):
            return data.draw(st.sampled_from(known))
        return data.draw(st.integers(0, self.clock.now_ms() + 200))

    def after_choice(self, data: st.DataObject, job: str) -> int | None:
        """Mostly what a job sends (nothing, or its last commit), sometimes any barrier."""
        j = self.model.jobs.get(job)
        choices: list[int | None] = [None, None]
        if j is not None and j.last_committed is not None:
            choices += [j.last_committed] * 2
        if data.draw(st.integers(0, 4)) == 0:
            return self.barrier_choice(data)
        return data.draw(st.sampled_from(choices))

    def tables_to_read(self, data: st.DataObject) -> list[str]:
        """Mostly tables with a version."""
        with_barriers = [n for n, t in self.model.tables.items() if t.order]
        pool = sorted(with_barriers) if with_barriers and data.draw(st.integers(0, 3)) else TABLES
        return data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4))

    # -- calls -------------------------------------------------------------------------------------

    def report_root(self, data: st.DataObject, table: str, *, odd: bool = False) -> None:
        """A new snapshot or a heartbeat; ``odd``: also repeats, regressions, any barrier."""
        t = self.model.tables.get(table)
        latest = t.latest if t is not None else None
        kinds = ["assigned", "newer"] + (["existing", "any"] if odd else [])
        kind = data.draw(st.sampled_from(kinds))
        barrier: int | None = None
        if kind == "newer" or (kind == "existing" and latest is None):
            barrier = (latest if latest is not None else START_MS) + data.draw(st.integers(1, 30))
        elif kind == "existing":
            barrier = data.draw(st.sampled_from(sorted(t.rows)))  # type: ignore[union-attr]
        elif kind == "any":
            barrier = self.barrier_choice(data)
        if odd:
            snapshot = self.snapshot_choice(data, table, barrier)
        elif latest is not None and data.draw(st.booleans()):
            snapshot = t.latest_snapshot  # type: ignore[union-attr,assignment]
        else:
            snapshot = self.fresh_snapshot()
        body = {"snapshot_id": snapshot} if barrier is None else {"snapshot_id": snapshot,
                                                                  "barrier": barrier}
        now = self.clock.now_ms()
        response = self.http.post(f"/tables/{path(table)}/barriers", json=body)
        self.expect(f"root {table} {body}", response,
                    lambda m: m.root_report(table, snapshot, barrier, now))

    def register(self, job: str, role: str, table: str) -> None:
        response = self.http.post(f"/register/{role}/{job}/{path(table)}")
        self.expect(f"register {role} {job} {table}", response,
                    lambda m: m.register(job, role, table))

    def start_job(self, job: str, start_from: str | int, default: bool = False) -> None:
        body = None if default else {"from": start_from}
        response = self.http.post(f"/jobs/{job}/start", json=body)
        self.expect(f"start {job} {body}", response, lambda m: m.start(job, start_from))

    def unregister_job(self, job: str) -> None:
        response = self.http.post(f"/unregister/{job}")
        self.expect(f"unregister {job}", response, lambda m: m.unregister(job))

    def next(self, job: str, after: int | None) -> dict[str, Any] | None:
        body = {} if after is None else {"after": after}
        response = self.http.post(f"/jobs/{job}/barriers/next", json=body)
        return self.expect(f"next {job} {body}", response, lambda m: m.next(job, after))

    def commit(self, job: str, table: str, barrier: int | None, snapshot: int) -> None:
        now = self.clock.now_ms()
        response = self.http.post(f"/commit/{job}/{path(table)}",
                                  json={"barrier": barrier, "snapshot_id": snapshot})
        self.expect(f"commit {job} {table} {barrier} {snapshot}", response,
                    lambda m: m.commit(job, table, barrier, snapshot, now))

    def job_step(self, data: st.DataObject, job: str) -> None:
        """What a well-behaved job does: next, then commit the barrier to its sinks (usually
        all of them) with fresh snapshots, or, replaying a commit it finds already made, with
        the recorded one. A job without sources commits at barriers of its own."""
        j = self.model.jobs[job]
        if not j.sources:
            for sink in sorted(j.sinks):
                barrier = data.draw(st.sampled_from([None, None, self.clock.now_ms() + 5]))
                self.commit(job, sink, barrier, self.snapshot_choice(data, sink, barrier))
            return
        answer = self.next(job, self.after_choice(data, job))
        if answer is None or answer["action"] != "process":
            return
        barrier = answer["barrier"]
        sinks = sorted(j.sinks)
        if sinks and data.draw(st.integers(0, 4)) == 0:  # it stops before committing them all
            sinks = data.draw(st.lists(st.sampled_from(sinks), unique=True,
                                       max_size=len(sinks) - 1))
        for sink in sinks:
            t = self.model.tables[sink]
            replay = barrier in t.rows and t.rows[barrier].writer == job
            self.commit(job, sink, barrier,
                        t.rows[barrier].snapshot if replay else self.fresh_snapshot())

    def read_versions(self, data: st.DataObject, consistency: str) -> None:
        tables = self.tables_to_read(data)
        body: dict[str, Any] = {"tables": tables}
        barrier = None
        if consistency == "barrier":
            barrier = self.barrier_choice(data)
            body["barrier"] = barrier
        else:
            body["consistency"] = consistency
        response = self.http.post("/versions", json=body)

        def answer(m: Model) -> dict[str, Any]:
            versions = m.versions(tables, consistency, barrier)
            return {"consistency": consistency,
                    "versions": {n: {"barrier": b, "snapshot_id": s}
                                 for n, (b, s) in versions.items()}}

        result = self.expect(f"versions {body}", response, answer)
        if result is not None and consistency == "strong":
            self.check_strong_never_moves_back(result["versions"])

    def read_version(self, data: st.DataObject, consistency: str) -> None:
        table = self.tables_to_read(data)[0]
        response = self.http.get(f"/version/{consistency}/{path(table)}")

        def answer(m: Model) -> dict[str, Any]:
            b, s = m.versions([table], consistency)[table]
            return {"table": table, "consistency": consistency, "barrier": b, "snapshot_id": s}

        result = self.expect(f"version {consistency} {table}", response, answer)
        if result is not None and consistency == "strong":
            self.check_strong_never_moves_back({table: result})

    def check_strong_never_moves_back(self, versions: dict[str, dict[str, int]]) -> None:
        """SPEC §4: strong cuts never move backwards (there is no rollback here)."""
        for name, version in versions.items():
            served = self.served_strong.get(name)
            assert served is None or version["barrier"] >= served, (name, served, version)
            self.served_strong[name] = version["barrier"]

    # -- rules ---------------------------------------------------------------------------------

    @rule(data=st.data())
    def root_tick(self, data: st.DataObject) -> None:
        """Ingestion moves a root forward (when there is one), and time passes."""
        roots = [t for t in TABLES if self.model.writer_of(t) is None]
        read = {t for j in self.jobs_in("running") for t in self.model.jobs[j].sources}
        if set(roots) & read and data.draw(st.integers(0, 3)):
            roots = sorted(set(roots) & read)  # mostly a root some running job reads,
            empty = [t for t in roots if self.model.table(t).latest is None]
            roots = empty or roots  # first one without barriers
        if roots:  # none while running jobs write every table: then only time passes
            self.report_root(data, data.draw(st.sampled_from(roots)))
        self.clock.advance(data.draw(st.sampled_from([0, 1, 10, 50])))

    def unplanned_jobs(self) -> list[str]:
        return [j for j in JOBS if j not in self.model.jobs
                or self.model.jobs[j].state == "terminated"]

    @precondition(lambda self: self.unplanned_jobs())
    @rule(data=st.data())
    def plan_job(self, data: st.DataObject) -> None:
        """Mostly downstream edges (chains and diamonds); sometimes anything (cycles, a job
        reading its own sink)."""
        job = data.draw(st.sampled_from(self.unplanned_jobs()))
        ordered = data.draw(st.integers(0, 3)) > 0
        sources = data.draw(st.lists(st.sampled_from(TABLES[:-1] if ordered else TABLES),
                                     min_size=1, max_size=3, unique=True))
        if data.draw(st.integers(0, 9)) == 0:
            sources = []  # ingestion run as a job
        after = TABLES
        if ordered and sources:
            after = TABLES[max(map(TABLES.index, sources)) + 1:]
        taken = {t for j in self.model.jobs.values() if j.state != "terminated" for t in j.sinks}
        if ordered and set(after) - taken:
            after = [t for t in after if t not in taken]  # a second writer only now and then
        sinks = data.draw(st.lists(st.sampled_from(after), min_size=1, max_size=2, unique=True))
        for table in sources:
            self.register(job, "source", table)
        for table in sinks:
            self.register(job, "sink", table)

    @precondition(lambda self: self.jobs_in("planned", "running"))
    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        """A planned job starts, or a running one's driver starts again after a crash."""
        planned = self.jobs_in("planned")
        job = data.draw(st.sampled_from(planned if planned and data.draw(st.integers(0, 2))
                                        else self.jobs_in("planned", "running")))
        kind = data.draw(st.sampled_from(["latest", "latest", "earliest", "barrier", "default"]))
        start_from: str | int = (self.barrier_choice(data) if kind == "barrier"
                                 else "latest" if kind == "default" else kind)
        self.start_job(job, start_from, default=kind == "default")

    @precondition(lambda self: self.jobs_in("running"))
    @rule(data=st.data(), catch_up=st.booleans())
    def restart_job(self, data: st.DataObject, catch_up: bool) -> None:
        """The job is stopped and started again with the same edges, a new run, which takes a
        step at once (with ``catch_up``, right after a step of the old run: the new run is
        handed the barrier the old one committed last, and replays its commits)."""
        job = data.draw(st.sampled_from(self.jobs_in("running")))
        if catch_up:
            self.job_step(data, job)
        j = self.model.jobs[job]
        sources, sinks = sorted(j.sources), sorted(j.sinks)
        self.unregister_job(job)
        for table in sources:
            self.register(job, "source", table)
        for table in sinks:
            self.register(job, "sink", table)
        self.start_job(job, "latest")
        if self.model.jobs[job].state == "running":
            self.job_step(data, job)
            self.job_step(data, job)

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data())
    def unregister(self, data: st.DataObject) -> None:
        self.unregister_job(data.draw(st.sampled_from(sorted(self.model.jobs))))

    @precondition(lambda self: self.jobs_in("running"))
    @rule(data=st.data())
    def pipeline_round(self, data: st.DataObject) -> None:
        """Every running job takes one step, upstream first."""
        def upstream_first(job: str) -> int:
            return min(map(TABLES.index, self.model.jobs[job].sinks), default=0)

        for job in sorted(self.jobs_in("running"), key=upstream_first):
            self.job_step(data, job)

    @precondition(lambda self: self.jobs_in("running"))
    @rule(data=st.data())
    def one_job_step(self, data: st.DataObject) -> None:
        self.job_step(data, data.draw(st.sampled_from(self.jobs_in("running"))))

    @precondition(lambda self: self.jobs_in("running"))
    @rule(data=st.data())
    def next_barrier(self, data: st.DataObject) -> None:
        job = self.some_job(data)
        self.next(job, self.after_choice(data, job))

    @precondition(lambda self: self.jobs_in("running"))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        """Mostly a job abandons the barrier it holds; sometimes one it does not."""
        pinned = [n for n in self.jobs_in("running") if self.model.jobs[n].pin is not None]
        if pinned and data.draw(st.integers(0, 3)):
            job = data.draw(st.sampled_from(pinned))
        else:
            job = self.some_job(data)
        j = self.model.jobs[job]
        choices = [self.barrier_choice(data)] + ([j.pin.barrier] * 3 if j.pin else [])
        barrier = data.draw(st.sampled_from(choices))
        response = self.http.post(f"/jobs/{job}/barriers/{barrier}/abort",
                                  json={"reason": "model"})
        self.expect(f"abort {job} {barrier}", response, lambda m: m.abort(job, barrier))

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data(),
          call=st.sampled_from(["root", "commit", "register", "unknown_job", "clock"]))
    def misbehave(self, data: st.DataObject, call: str) -> None:
        """What a client should not do (or may do by accident, like repeating itself)."""
        table = data.draw(st.sampled_from(TABLES))
        if call == "root":
            self.report_root(data, table, odd=True)
        elif call == "commit":
            job = self.some_job(data)
            j = self.model.jobs[job]
            choices = [None, self.barrier_choice(data)]
            choices += [b for b in (j.pin.barrier if j.pin else None, j.last_committed) if b]
            barrier = data.draw(st.sampled_from(choices))
            self.commit(job, table, barrier, self.snapshot_choice(data, table, barrier))
        elif call == "register":
            role = data.draw(st.sampled_from(["source", "sink"]))
            self.register(data.draw(st.sampled_from(JOBS)), role, table)
        elif call == "unknown_job":
            for url in ("/jobs/ghost/start", "/unregister/ghost", "/jobs/ghost/barriers/next",
                        "/jobs/ghost/barriers/5/abort", f"/commit/ghost/{path(table)}"):
                body = {"barrier": 5, "snapshot_id": 5} if "commit" in url else {}
                response = self.http.post(url, json=body)
                assert response.status_code == 404, (url, response.text)
                assert response.json()["error"]["code"] == "unknown_job", response.text
        else:
            self.clock.advance(data.draw(st.sampled_from([1, 100, 5_000])))

    @rule(data=st.data(), consistency=st.sampled_from(["strong", "strong", "weak", "barrier"]),
          single=st.booleans())
    def read(self, data: st.DataObject, consistency: str, single: bool) -> None:
        if single and consistency != "barrier":
            self.read_version(data, consistency)
        else:
            self.read_versions(data, consistency)

    # -- invariants: the database against the model and SPEC §3 ---------------------------------

    @invariant()
    def database_agrees(self) -> None:
        with self.database.engine.connect() as conn:
            tables = {r.id: r for r in conn.execute(select(TableRow))}
            names = {i: f"{r.catalog}.{r.database}.{r.name}" for i, r in tables.items()}
            barriers = conn.execute(select(BarrierRow)).all()
            jobs = {r.name: r for r in conn.execute(select(JobRow))}
            edges = conn.execute(select(JobTableRow)).all()

        assert set(names.values()) == set(self.model.tables), "tables"
        by_table: dict[str, list[Any]] = {n: [] for n in names.values()}
        for b in barriers:
            assert not b.rolled_back
            by_table[names[b.table_id]].append(b)
        for table_id, row in tables.items():
            name = names[table_id]
            model = self.model.tables[name]
            recorded = by_table[name]
            assert {b.barrier: b.snapshot_id for b in recorded} == \
                {b: r.snapshot for b, r in model.rows.items()}, name
            # SPEC §3.3: completed barriers strictly increase in commit order.
            assert all(b1 < b2 for b1, b2 in itertools.pairwise(model.order)), name
            for a in recorded:
                for b in recorded:
                    assert not (a.committed_at < b.committed_at and a.barrier > b.barrier), name
            assert row.latest_barrier == model.latest, name
            assert row.latest_snapshot_id == model.latest_snapshot, name
            assert row.catching_up == model.catching_up, (name, "catching_up")
            assert row.writer_job == self.model.writer_of(name), (name, "writer")

        assert set(jobs) == set(self.model.jobs), "jobs"
        job_edges: dict[str, tuple[set[str], set[str]]] = {n: (set(), set()) for n in jobs}
        for e in edges:
            job_edges[e.job_name][0 if e.role == "source" else 1].add(names[e.table_id])
        for name, row in jobs.items():
            model_job = self.model.jobs[name]
            assert (row.state, row.run) == (model_job.state, model_job.run), name
            assert job_edges[name] == (model_job.sources, model_job.sinks), name
            if row.state == "running":
                assert row.pinned_barrier == (model_job.pin.barrier if model_job.pin else None)
                assert row.last_committed_barrier == model_job.last_committed, name

        running = {n: job_edges[n] for n, r in jobs.items() if r.state == "running"}
        # SPEC §3.1: at most one running writer per table.
        sinks = [t for _, ks in running.values() for t in ks]
        assert len(sinks) == len(set(sinks)), running
        # SPEC §3.2: no cycle among running jobs.
        assert not Model.has_cycle(running), running


def test_protocol_matches_the_reference_model(client: httpx.Client, clock: ManualClock,
                                              database: Database) -> None:
    harness = Harness(client, clock, database)
    run_state_machine_as_test(
        lambda: ProtocolMachine(harness),
        settings=settings(max_examples=25, stateful_step_count=30, deadline=None,
                          suppress_health_check=list(HealthCheck)),
    )


# -- what the model found, kept as plain examples ---------------------------------------------


def _post(client: httpx.Client, url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = client.post(url, json=body or {})
    assert response.status_code == 200, response.text
    return response.json()


def _plan(client: httpx.Client, job: str, sources: list[str], sinks: list[str]) -> None:
    for role, tables in (("source", sources), ("sink", sinks)):
        for t in tables:
            _post(client, f"/register/{role}/{job}/lake/db/{t}")


def test_a_restarted_run_replaying_the_commits_of_the_old_one_moves_on(
        client: httpx.Client) -> None:
    """The old run committed barrier 10 to one sink of two, then stopped. The new run is
    handed 10 again; its replay of the commit the old run made counts, so committing the other
    sink finishes 10."""
    _plan(client, "etl", ["a"], ["b", "c"])
    _post(client, "/tables/lake/db/a/barriers", {"barrier": 10, "snapshot_id": 1})
    assert _post(client, "/jobs/etl/start")["barrier"] == 10
    _post(client, "/commit/etl/lake/db/b", {"barrier": 10, "snapshot_id": 100})
    _post(client, "/unregister/etl")
    _plan(client, "etl", ["a"], ["b", "c"])
    assert _post(client, "/jobs/etl/start")["barrier"] == 10
    _post(client, "/commit/etl/lake/db/b", {"barrier": 10, "snapshot_id": 100})  # the replay
    _post(client, "/commit/etl/lake/db/c", {"barrier": 10, "snapshot_id": 200})
    job = client.get("/jobs/etl").json()
    assert (job["last_committed_barrier"], job["pinned_barrier"]) == (10, None)
    _post(client, "/tables/lake/db/a/barriers", {"barrier": 20, "snapshot_id": 2})
    step = _post(client, "/jobs/etl/barriers/next")
    assert (step["barrier"], step["previous"]) == (20, {"lake.db.a": 1})


def test_a_replayed_commit_of_the_pinned_barrier_releases_it(client: httpx.Client) -> None:
    """A new run handed the barrier the old run had finished replays the commit; the barrier is
    done, and ``next`` does not hand it out again."""
    _plan(client, "etl", ["a"], ["b"])
    _post(client, "/tables/lake/db/a/barriers", {"barrier": 10, "snapshot_id": 1})
    _post(client, "/jobs/etl/start")
    _post(client, "/commit/etl/lake/db/b", {"barrier": 10, "snapshot_id": 100})
    _post(client, "/unregister/etl")
    _plan(client, "etl", ["a"], ["b"])
    assert _post(client, "/jobs/etl/start")["barrier"] == 10
    _post(client, "/commit/etl/lake/db/b", {"barrier": 10, "snapshot_id": 100})
    assert _post(client, "/jobs/etl/barriers/next", {"after": 10})["action"] == "wait"


def test_starting_a_running_job_again_goes_on_where_the_run_is(client: httpx.Client) -> None:
    """A driver restarted mid-run calls start: it gets the next barrier with ``previous`` (an
    incremental read), never the full start position again nor a barrier already committed."""
    _plan(client, "etl", ["a"], ["b"])
    _post(client, "/tables/lake/db/a/barriers", {"barrier": 10, "snapshot_id": 1})
    _post(client, "/jobs/etl/start")
    _post(client, "/commit/etl/lake/db/b", {"barrier": 10, "snapshot_id": 100})
    assert _post(client, "/jobs/etl/start")["action"] == "wait"
    _post(client, "/tables/lake/db/a/barriers", {"barrier": 20, "snapshot_id": 2})
    again = _post(client, "/jobs/etl/start", {"from": "latest"})
    assert (again["action"], again["barrier"]) == ("process", 20)
    assert again["previous"] == {"lake.db.a": 1}


def test_starting_a_running_job_at_an_explicit_barrier_pins_that_barrier(
        client: httpx.Client) -> None:
    """How a streaming sink replays a micro-batch whose barrier the service no longer pins."""
    _plan(client, "etl", ["a"], ["b"])
    _post(client, "/tables/lake/db/a/barriers", {"barrier": 10, "snapshot_id": 1})
    _post(client, "/jobs/etl/start")
    _post(client, "/commit/etl/lake/db/b", {"barrier": 10, "snapshot_id": 100})
    _post(client, "/tables/lake/db/a/barriers", {"barrier": 20, "snapshot_id": 2})
    _post(client, "/tables/lake/db/a/barriers", {"barrier": 30, "snapshot_id": 3})
    assert _post(client, "/jobs/etl/barriers/next")["barrier"] == 30
    _post(client, "/jobs/etl/barriers/30/abort", {"reason": "replaying 20"})
    again = _post(client, "/jobs/etl/start", {"from": 20})
    assert (again["action"], again["barrier"], again["snapshots"]) == ("process", 20,
                                                                       {"lake.db.a": 2})
    _post(client, "/commit/etl/lake/db/b", {"barrier": 20, "snapshot_id": 200})
    assert client.get("/jobs/etl").json()["last_committed_barrier"] == 20
