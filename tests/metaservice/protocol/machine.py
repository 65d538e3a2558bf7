"""A randomized pipeline over the real HTTP API, every answer checked against ``reference``.

Hypothesis draws a topology — two or three roots, three or more sibling jobs of one root at
random relative speeds, fan-in joins of siblings' outputs (and of a second root), chains — and
then runs it: ingestion reports snapshots and heartbeats, jobs step (``next`` then ``commit``;
some jobs step more often, some hold a barrier a while), stop, and start again with each
``from`` (resume, latest, earliest, an explicit barrier), abort, tables are rolled back
(plan → apply → complete; the jobs then get ``abort`` and go on), and readers ask for strong,
weak and explicit-barrier versions, sometimes leased.

Checked at every answer (``Checks``): every ``process`` answer of ``start``/``next`` names
snapshots exact at its barrier (``snapshots`` = snap(s, B), ``previous`` = snap(s, B_prev)) and
never a barrier at or below its sink's latest; every version answer names, per table, snap(T, B)
with T exact at the cut B and ``snapshot_barrier`` the barrier that snapshot completed, one cut
per component; strong cuts never move backwards (except across an applied rollback) and agree
between queries at the same moment; an explicit barrier at which some table is not exact is
``409 barrier_not_exact`` naming exactly those tables. At the end (``teardown``) ingestion stops
with a heartbeat of every root at one final barrier F, every running job asks next/commit until
it waits, and every table's strong version must be F.

The checks fall in kinds (``KINDS``). A profile enforces some of them (the first violation
fails the example) and counts the others; ``METASERVICE_MODEL_SURVEY=1`` enforces none and only
counts, to measure a server (``test_machine.py`` prints the figures).
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from sqlalchemy import text

from metaservice.clock import ManualClock
from metaservice.db.session import Database
from tests.conftest import wipe
from tests.metaservice.protocol.reference import History

START_MS = 1_000_000
_topology_versions = itertools.count(1_000_000_000, 1_000_000)

KINDS = {
    "http_error": "a 5xx, or an error the situation does not allow",
    "process_not_exact": "a start/next process answer names a source snapshot that is not "
                         "snap(s, B), or a source not exact at B",
    "process_previous": "previous is not snap(s, B_prev), or a resume/next is not incremental",
    "process_at_or_below_sink": "a process answer hands a barrier ≤ a sink's latest",
    "start_shape": "a start answer without barrier/previous keys (null when waiting)",
    "version_not_exact": "a version names a snapshot that is not snap(T, cut), or T is not "
                         "exact at the cut",
    "snapshot_barrier": "snapshot_barrier missing or not the barrier the snapshot completed",
    "cut_split": "two tables of one component answered at different cuts",
    "cut_not_completed": "a cut no table of the component completed",
    "cut_above_latest": "a cut above the latest of a table it names",
    "weak_not_greatest": "a weak cut below the greatest barrier all requested tables share",
    "strong_below_reference": "a strong cut below the cut of all the component's tables",
    "strong_disagrees": "two strong queries of one component at the same moment disagree",
    "strong_backwards": "a component's strong cut moved backwards without a rollback",
    "explicit_not_exact": "an explicit-barrier answer names a table not exact there",
    "explicit_refusal": "an explicit barrier refused wrongly or naming the wrong tables",
    "lease": "a leased read whose lease does not hold exactly the snapshots answered",
    "rollback_plan": "a rollback plan not covering exactly the affected tables",
    "drain": "after the final drain, a table's strong version is not the final barrier",
}


class Violation(AssertionError):
    pass


@dataclass
class Profile:
    """What a run draws and which kinds of violation fail it."""

    name: str
    shape: str  # "fanout" or "chains"
    starts: tuple[str, ...]  # the `from` values a restart draws ("default": no body)
    rollbacks: bool
    enforce: frozenset[str]


ALL = frozenset(KINDS)
FANOUT = Profile("fanout", "fanout",
                 ("default", "resume", "latest", "earliest", "barrier"), True, ALL)
# What holds without the exactness contract: chains only, the starts that existed before.
CHAINS = Profile("chains", "chains", ("default", "latest"), True,
                 frozenset({"strong_backwards", "drain", "http_error", "strong_disagrees",
                            "rollback_plan", "lease"}))


@dataclass
class Record:
    """What runs of a machine found: violations by kind (first examples kept), steps, and the
    strong cut's trail behind the slowest derived table."""

    violations: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)  # a few distinct ones
    answers: Counter[str] = field(default_factory=Counter)  # checked answers by kind of call
    rules: Counter[str] = field(default_factory=Counter)  # steps by rule
    steps: int = 0
    runs: int = 0
    drains: int = 0
    trail: Counter[int] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {"runs": self.runs, "steps": self.steps, "drains": self.drains,
                "rules": dict(self.rules),
                "answers": dict(self.answers), "violating_answers": sum(self.violations.values()),
                "violations": dict(sorted(self.violations.items())),
                "trail": dict(sorted(self.trail.items())), "examples": self.examples}


@dataclass
class JobSpec:
    name: str
    sources: tuple[str, ...]
    sink: str
    weight: int


@dataclass
class Driver:
    """What a job's driver knows: its last committed barrier and the answer it holds."""

    spec: JobSpec
    running: bool = False
    after: int | None = None
    held: dict[str, Any] | None = None
    stale: bool = False  # a rollback may have invalidated what it holds
    full_ok: bool = False  # its first step may be full (a start other than resume waited)


def path(table: str) -> str:
    return table.replace(".", "/")


def code(response: httpx.Response) -> str:
    if 200 <= response.status_code < 300:
        return "ok"
    try:
        return str(response.json()["error"]["code"])
    except Exception:  # noqa: BLE001
        return f"status {response.status_code}"


class ProtocolMachine(RuleBasedStateMachine):
    profile: Profile = FANOUT
    record: Record = Record()
    survey: bool = False

    def __init__(self, http: httpx.Client, clock: ManualClock, database: Database) -> None:
        super().__init__()
        self.http, self.clock, self.database = http, clock, database
        self.history = History()
        self.jobs: dict[str, Driver] = {}
        self.roots: list[str] = []
        self.snapshot_ids = itertools.count(1)
        self.strong_served: dict[frozenset[str], int] = {}  # component -> last strong cut
        # table -> its greatest strong cut yet, across topology changes (merges and splits)
        self.strong_served_table: dict[str, int] = {}
        self.failed = False
        wipe(database)
        # A topology version never used before: a cache filled by an earlier example must miss.
        with database.engine.begin() as conn:
            conn.execute(text("UPDATE topology_state SET version = :v"),
                         {"v": next(_topology_versions)})
        clock.set(START_MS)
        self.record.runs += 1

    # -- checking --------------------------------------------------------------------------

    def violation(self, kind: str, message: str) -> None:
        assert kind in KINDS, kind
        self.record.violations[kind] += 1
        kept = self.record.examples.setdefault(kind, [])
        if len(kept) < 4 and not any(k[:50] == message[:50] for k in kept):
            kept.append(message[:600])
        if not self.survey and kind in self.profile.enforce:
            self.failed = True
            raise Violation(f"{kind}: {message}")

    def check(self, ok: bool, kind: str, message: str) -> bool:
        if not ok:
            self.violation(kind, message)
        return ok

    def call(self, method: str, url: str, body: dict[str, Any] | None = None,
             allowed: tuple[str, ...] = ()) -> httpx.Response:
        response = self.http.request(method, url, json=body)
        got = code(response)
        if got != "ok" and got not in allowed:
            self.violation("http_error", f"{method} {url} {body} -> {response.status_code} "
                                         f"{response.text[:300]}")
        return response

    # -- topology --------------------------------------------------------------------------

    @initialize(data=st.data())
    def pipeline(self, data: st.DataObject) -> None:
        specs = (self.fanout(data) if self.profile.shape == "fanout" else self.chains(data))
        for spec in specs:
            self.jobs[spec.name] = Driver(spec)
            self.history.table(spec.sink)
            for s in spec.sources:
                self.history.table(s)
        for root in self.roots:
            for _ in range(data.draw(st.integers(0, 2), label="first reports")):
                self.report(root, data.draw(st.booleans(), label="heartbeat"))
        for name in sorted(self.jobs):
            if data.draw(st.integers(0, 4), label="start at once"):
                self.start(name, data.draw(st.sampled_from(["default", "latest"]),
                                           label="from"))

    def weight(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from([1, 1, 2, 4]), label="speed")

    def fanout(self, data: st.DataObject) -> list[JobSpec]:
        """Siblings s0..s{n-1}: r0 -> x{i}; joins of two siblings' outputs (or one and r1);
        r1 -> w0; maybe a chain on a join; maybe an unrelated r2 -> v0 -> v1."""
        self.roots = ["lake.db.r0", "lake.db.r1"]
        specs = []
        siblings = data.draw(st.integers(3, 4), label="siblings")
        outputs = [f"lake.db.x{i}" for i in range(siblings)]
        for i in range(siblings):
            specs.append(JobSpec(f"s{i}", ("lake.db.r0",), outputs[i], self.weight(data)))
        specs.append(JobSpec("b0", ("lake.db.r1",), "lake.db.w0", self.weight(data)))
        pool = [*outputs, "lake.db.r1", "lake.db.w0"]
        joins = data.draw(st.integers(1, 2), label="joins")
        for m in range(joins):
            first = data.draw(st.sampled_from(outputs), label="join input")
            second = data.draw(st.sampled_from([t for t in pool if t != first]),
                               label="join input")
            specs.append(JobSpec(f"j{m}", (first, second), f"lake.db.y{m}", self.weight(data)))
        if data.draw(st.booleans(), label="chain"):
            specs.append(JobSpec("c0", ("lake.db.y0",), "lake.db.z0", self.weight(data)))
        if data.draw(st.booleans(), label="third root"):
            self.roots.append("lake.db.r2")
            specs.append(JobSpec("d0", ("lake.db.r2",), "lake.db.v0", self.weight(data)))
            specs.append(JobSpec("d1", ("lake.db.v0",), "lake.db.v1", self.weight(data)))
        return specs

    def chains(self, data: st.DataObject) -> list[JobSpec]:
        """r0 -> a0 -> a1 (-> a2), r1 -> b0 (-> b1), maybe r2 -> c0: no table read twice."""
        self.roots = ["lake.db.r0", "lake.db.r1"]
        specs = []
        for root, prefix, longest in (("lake.db.r0", "a", 3), ("lake.db.r1", "b", 2)):
            source = root
            for i in range(data.draw(st.integers(1, longest), label="chain length")):
                sink = f"lake.db.{prefix}{i}"
                specs.append(JobSpec(f"{prefix}{i}", (source,), sink, self.weight(data)))
                source = sink
        if data.draw(st.booleans(), label="third root"):
            self.roots.append("lake.db.r2")
            specs.append(JobSpec("c0", ("lake.db.r2",), "lake.db.c0", self.weight(data)))
        return specs

    def running(self) -> list[str]:
        return sorted(n for n, d in self.jobs.items() if d.running)

    def stopped(self) -> list[str]:
        return sorted(n for n, d in self.jobs.items() if not d.running)

    def tables(self) -> list[str]:
        return sorted(self.history.barriers)

    # -- calls -------------------------------------------------------------------------------

    def fresh_snapshot(self) -> int:
        return next(self.snapshot_ids) * 1_000_003

    def report(self, table: str, heartbeat: bool, barrier: int | None = None) -> None:
        """Ingestion: a new snapshot (or the latest again) at the clock's barrier."""
        latest = self.history.latest(table)
        if barrier is None:
            self.clock.advance(1)
            barrier = self.clock.now_ms()
            if latest is not None and barrier <= latest:
                barrier = latest + 1
        snapshot = (self.history.barriers[table][latest] if heartbeat and latest is not None
                    else self.fresh_snapshot())
        response = self.call("POST", f"/tables/{path(table)}/barriers",
                             {"snapshot_id": snapshot, "barrier": barrier})
        if response.status_code == 200:
            self.history.complete(table, barrier, snapshot)

    def register(self, spec: JobSpec) -> None:
        for s in spec.sources:
            self.call("POST", f"/register/source/{spec.name}/{path(s)}")
        self.call("POST", f"/register/sink/{spec.name}/{path(spec.sink)}")

    def start(self, name: str, start_from: str | int) -> None:
        """Register and start a stopped job (the position checked like a next answer)."""
        driver = self.jobs[name]
        spec = driver.spec
        self.register(spec)
        body = None if start_from == "default" else {"from": start_from}
        explicit = isinstance(start_from, int)
        response = self.call("POST", f"/jobs/{name}/start", body,
                             allowed=("barrier_not_complete", "barrier_not_exact",
                                      "no_version") if explicit else ())
        if response.status_code != 200:
            if explicit:
                self.check_explicit_start_refusal(spec, start_from, response)  # type: ignore[arg-type]
                self.start(name, "default")
            return
        self.history.start(name, spec.sources, (spec.sink,))
        driver.running, driver.held, driver.stale = True, None, False
        driver.after = None
        self.record.answers["start"] += 1
        answer = response.json()
        driver.full_ok = answer.get("action") == "wait" and not self.resumes(start_from)
        if answer.get("action") in ("wait", "process"):
            self.check("barrier" in answer and "previous" in answer, "start_shape",
                       f"start {name} {body}: {answer}")
        if answer.get("action") == "process":
            self.check_process(spec, answer, f"start {name} {body}", start_from)
            driver.held = answer

    def check_explicit_start_refusal(self, spec: JobSpec, barrier: int,
                                     response: httpx.Response) -> None:
        error = response.json()["error"]
        behind = [s for s in spec.sources
                  if self.history.latest(s) is None or self.history.latest(s) < barrier]  # type: ignore[operator]
        if error["code"] == "barrier_not_complete":
            self.check(bool(behind), "explicit_refusal",
                       f"start {spec.name} at {barrier}: {error} but every source completed it")
        elif error["code"] == "barrier_not_exact":
            self.check(not behind and bool(self.history.not_exact(spec.sources, barrier)),
                       "explicit_refusal", f"start {spec.name} at {barrier}: {error}, "
                                           f"not exact: "
                                           f"{self.history.not_exact(spec.sources, barrier)}")

    def stop(self, name: str) -> None:
        self.call("POST", f"/unregister/{name}")
        driver = self.jobs[name]
        self.history.stop(name)
        driver.running, driver.held = False, None

    def check_process(self, spec: JobSpec, answer: dict[str, Any], what: str,
                      start_from: str | int | None) -> None:
        """A process answer of start (``start_from`` given) or next."""
        h = self.history
        barrier = answer["barrier"]
        snapshots = answer.get("snapshots") or {}
        sink_latest = h.latest(spec.sink)
        self.check(sink_latest is None or barrier > sink_latest, "process_at_or_below_sink",
                   f"{what}: barrier {barrier}, {spec.sink} latest {sink_latest}")
        expected = {s: h.snap(s, barrier) for s in spec.sources}
        wrong = {s for s in spec.sources if snapshots.get(s) != expected[s]}
        not_exact = h.not_exact(spec.sources, barrier)
        self.check(not wrong and not not_exact and set(snapshots) == set(spec.sources),
                   "process_not_exact",
                   f"{what}: {answer}; expected {expected}, not exact at {barrier}: {not_exact}, "
                   f"sources {self.describe(spec.sources)}")
        previous = answer.get("previous")
        if previous == {} and (sink_latest is None
                               or all(h.snap(s, sink_latest) is None for s in spec.sources)):
            # ``previous`` is snap(s, B_prev) of each source, and no source had one there: the
            # contract's answer (the plugin reads every source in full, as in a full step).
            return
        previous = previous or None
        if previous is None:
            # A full step replaces the sink: allowed for a start, and for a next only while the
            # sink holds nothing (and never for a resume of a sink with history).
            if start_from is None:
                incremental_needed = not self.jobs[spec.name].full_ok
            else:
                incremental_needed = self.resumes(start_from)
            self.check(not (incremental_needed and sink_latest is not None),
                       "process_previous", f"{what}: full step over {spec.sink} at "
                                           f"{sink_latest}: {answer}")
            return
        b_prev = sink_latest
        want = {s: h.snap(s, b_prev) for s in spec.sources} if b_prev is not None else {}
        got = {s: previous.get(s) for s in spec.sources}
        self.check(b_prev is not None and got == want, "process_previous",
                   f"{what}: previous {previous}, expected snap at {spec.sink}'s latest "
                   f"{b_prev}: {want}")

    def resumes(self, start_from: str | int) -> bool:
        """``resume``, or the default (which is ``resume`` where the profile knows it)."""
        return start_from == "resume" or (start_from == "default"
                                          and "resume" in self.profile.starts)

    def describe(self, tables: Any) -> str:
        return "; ".join(f"{t}={self.history.barriers.get(t)}" for t in sorted(set(tables)))

    def step(self, name: str, *, commit: bool = True) -> str:
        """One step of a job's driver: commit what it holds, or ask next (and commit it).
        Returns the action seen ("process", "wait", "abort", "refused")."""
        driver = self.jobs[name]
        spec = driver.spec
        if driver.held is not None and commit:
            return self.commit(name)
        response = self.call("POST", f"/jobs/{name}/barriers/next",
                             {} if driver.after is None else {"after": driver.after})
        if response.status_code != 200:
            return "refused"
        answer = response.json()
        self.record.answers["next"] += 1
        action = answer["action"]
        if action == "abort":
            driver.held, driver.stale = None, False
            driver.after = answer.get("restart_after")
            if driver.after is None:
                driver.after = self.history.latest(spec.sink)
            return action
        if action == "process":
            if driver.held is None or driver.held["barrier"] != answer["barrier"]:
                self.check_process(spec, answer, f"next {name} after {driver.after}", None)
            driver.held, driver.full_ok = answer, False
            if commit:
                return self.commit(name)
        return action

    def commit(self, name: str) -> str:
        driver = self.jobs[name]
        spec = driver.spec
        assert driver.held is not None
        barrier = driver.held["barrier"]
        recorded = self.history.barriers[spec.sink].get(barrier)
        snapshot = recorded if recorded is not None else self.fresh_snapshot()  # a replay
        response = self.call("POST", f"/commit/{name}/{path(spec.sink)}",
                             {"barrier": barrier, "snapshot_id": snapshot},
                             allowed=("barrier_rolled_back", "unknown_barrier",
                                      "rollback_in_progress") if driver.stale else ())
        if response.status_code == 200:
            self.history.complete(spec.sink, barrier, snapshot)
            driver.after, driver.held = barrier, None
            return "process"
        driver.held = None  # it asks again, and learns what happened
        return "refused"

    # -- versions ----------------------------------------------------------------------------

    def cuts_of(self, versions: dict[str, dict[str, Any]], what: str) -> dict[str, int]:
        """The cut each answered table was read at; a legacy answer (no snapshot_barrier) is
        read at the greatest barrier answered in its component."""
        cuts = {}
        for table, v in versions.items():
            if "snapshot_barrier" not in v:
                self.violation("snapshot_barrier", f"{what}: no snapshot_barrier in {v}")
                component = self.history.component(table)
                cuts[table] = max(w["barrier"] for t, w in versions.items() if t in component)
            else:
                cuts[table] = v["barrier"]
        return cuts

    def check_versions(self, consistency: str, versions: dict[str, dict[str, Any]],
                       what: str) -> dict[frozenset[str], int]:
        """Checks shared by strong and weak answers; returns the cut per component."""
        h = self.history
        cuts = self.cuts_of(versions, what)
        per_component: dict[frozenset[str], set[int]] = {}
        for table, v in versions.items():
            cut = cuts[table]
            per_component.setdefault(h.component(table), set()).add(cut)
            snapshot_barrier = v.get("snapshot_barrier", v["barrier"])
            self.check(v["snapshot_id"] == h.snap(table, cut) and h.exact(table, cut),
                       "version_not_exact",
                       f"{what}: {table} {v} at cut {cut}; snap {h.snap(table, cut)}, "
                       f"exact {h.exact(table, cut)}; {self.describe(h.component(table))}")
            if "snapshot_barrier" in v:
                self.check(snapshot_barrier == h.snap_barrier(table, cut), "snapshot_barrier",
                           f"{what}: {table} {v}, expected {h.snap_barrier(table, cut)}")
            latest = h.latest(table)
            self.check(latest is not None and cut <= latest, "cut_above_latest",
                       f"{what}: {table} at {cut}, latest {latest}")
        result = {}
        for component, found in per_component.items():
            self.check(len(found) == 1, "cut_split", f"{what}: cuts {sorted(found)} in "
                                                     f"{sorted(component)}: {versions}")
            cut = max(found)
            result[component] = cut
            self.check(cut in set(h.candidates(component)), "cut_not_completed",
                       f"{what}: cut {cut}; {self.describe(component)}")
        return result

    def check_weak(self, tables: list[str], versions: dict[str, dict[str, Any]],
                   what: str) -> None:
        h = self.history
        cuts = self.check_versions("weak", versions, what)
        for component, cut in cuts.items():
            asked = [t for t in tables if t in component]
            floor = h.latest(asked[0]) if len(set(asked)) == 1 else h.common_cut(asked)
            self.check(floor is None or cut >= floor, "weak_not_greatest",
                       f"{what}: cut {cut} < {floor}; {self.describe(component)}")

    def check_strong(self, versions: dict[str, dict[str, Any]], what: str) -> None:
        h = self.history
        cuts = self.check_versions("strong", versions, what)
        for component, cut in cuts.items():
            # The cut of every table of the component, among the barriers the answered (so
            # caught-up) tables completed, is a floor for the caught-up ones'. A table with no
            # barrier yet holds its component at the cut it joined (docs/decisions.md), which
            # this reference does not model: then only monotonicity and exactness are checked.
            empty = any(h.latest(t) is None for t in component)
            floor = None if empty else h.common_cut(component,
                                                    among=set(versions) & component)
            self.check(floor is None or cut >= floor, "strong_below_reference",
                       f"{what}: cut {cut} < {floor}; {self.describe(component)}")
            served = self.strong_served.get(component)
            self.check(served is None or cut >= served, "strong_backwards",
                       f"{what}: {sorted(component)} served {served}, now {cut}")
            self.strong_served[component] = max(cut, served or cut)
            for table in set(versions) & component:
                before = self.strong_served_table.get(table)
                self.check(before is None or cut >= before, "strong_backwards",
                           f"{what}: {table} served {before} before, now {cut} "
                           f"(across topology changes); {self.describe(component)}")
                self.strong_served_table[table] = max(cut, before or cut)
            trail = h.trail(component, cut)
            if trail is not None:
                self.record.trail[trail] += 1
            # Another query of the component at the same moment sees the same cut.
            others = sorted(component - set(versions))
            if others and h.latest(others[0]) is not None:
                response = self.http.get(f"/version/strong/{path(others[0])}")
                if response.status_code == 200:
                    body = response.json()
                    other = body["barrier"] if "snapshot_barrier" in body else None
                    if other is not None:
                        self.check(other == cut, "strong_disagrees",
                                   f"{what}: cut {cut}, {others[0]} alone: {body}")

    def read(self, consistency: str, tables: list[str], barrier: int | None = None,
             lease: bool = False) -> None:
        body: dict[str, Any] = {"tables": tables}
        if barrier is None:
            body["consistency"] = consistency
        else:
            body["barrier"] = barrier
        if lease:
            body.update({"lease_seconds": 60, "holder": "model"})
        what = f"versions {body}"
        h = self.history
        allowed: tuple[str, ...] = ("no_version",)
        if barrier is not None:
            allowed += ("barrier_not_complete", "barrier_not_exact")
        elif consistency == "strong":
            allowed += ("catching_up",)
        response = self.call("POST", "/versions", body, allowed=allowed)
        self.record.answers[f"versions {consistency if barrier is None else 'barrier'}"] += 1
        if response.status_code != 200:
            error = response.json()["error"]
            if error["code"] == "no_version" and consistency != "strong":
                # Some table has no barrier (at or below an explicit one), or some component
                # has no barrier all its requested tables share.
                groups: dict[frozenset[str], list[str]] = {}
                for t in tables:
                    groups.setdefault(h.component(t), []).append(t)
                self.check(any(h.latest(t) is None or (barrier is not None
                                                       and h.snap(t, barrier) is None)
                               for t in tables)
                           or (barrier is None and any(h.common_cut(g) is None
                                                       for g in groups.values())),
                           "http_error", f"{what}: {error}; {self.describe(tables)}")
            if barrier is not None:
                self.check_explicit_refusal(tables, barrier, error, what)
            return
        answer = response.json()
        versions = answer["versions"]
        if barrier is not None:
            self.check_explicit(tables, barrier, versions, what)
        elif consistency == "weak":
            self.check_weak(tables, versions, what)
        else:
            self.check_strong(versions, what)
        if lease:
            self.check_lease(answer, versions, what)

    def read_one(self, consistency: str, table: str) -> None:
        response = self.call("GET", f"/version/{consistency}/{path(table)}",
                             allowed=("no_version", "catching_up"))
        self.record.answers[f"version {consistency}"] += 1
        if response.status_code != 200:
            return
        body = response.json()
        versions = {table: {k: v for k, v in body.items() if k not in ("table", "consistency")}}
        if consistency == "weak":
            self.check_weak([table], versions, f"version weak {table}")
        else:
            self.check_strong(versions, f"version strong {table}")

    def check_explicit(self, tables: list[str], barrier: int,
                       versions: dict[str, dict[str, Any]], what: str) -> None:
        h = self.history
        for t in set(tables):
            v = versions[t]
            self.check(v["snapshot_id"] == h.snap(t, barrier) and h.exact(t, barrier),
                       "explicit_not_exact",
                       f"{what}: {t} {v}; snap {h.snap(t, barrier)}, exact "
                       f"{h.exact(t, barrier)}; {self.describe(h.component(t))}")
            if "snapshot_barrier" in v:
                self.check(v["barrier"] == barrier
                           and v["snapshot_barrier"] == h.snap_barrier(t, barrier),
                           "snapshot_barrier", f"{what}: {t} {v}")

    def check_explicit_refusal(self, tables: list[str], barrier: int, error: dict[str, Any],
                               what: str) -> None:
        h = self.history
        behind = sorted({t for t in tables if h.latest(t) is None or h.latest(t) < barrier})  # type: ignore[operator]
        not_exact = h.not_exact(tables, barrier)
        named = sorted(error.get("details", {}).get("tables", []))
        if error["code"] == "barrier_not_complete":
            self.check(bool(behind) and named == behind, "explicit_refusal",
                       f"{what}: {error}, behind {behind}")
        elif error["code"] == "barrier_not_exact":
            self.check(not behind and bool(not_exact) and named == not_exact,
                       "explicit_refusal",
                       f"{what}: {error}, not exact {not_exact}; "
                       f"{self.describe(tables)}")
            nearest = error.get("details", {}).get("nearest", {})
            self.check(sorted(nearest) == not_exact, "explicit_refusal",
                       f"{what}: nearest {nearest} for {not_exact}")

    def check_lease(self, answer: dict[str, Any], versions: dict[str, dict[str, Any]],
                    what: str) -> None:
        lease_id = answer.get("lease_id")
        if not self.check(lease_id is not None, "lease", f"{what}: no lease_id in {answer}"):
            return
        lease = self.call("GET", f"/leases/{lease_id}").json()
        held = {(s["table"], s["snapshot_id"]) for s in lease.get("snapshots", [])}
        self.check(held == {(t, v["snapshot_id"]) for t, v in versions.items()}, "lease",
                   f"{what}: lease {lease} for {versions}")
        self.call("DELETE", f"/leases/{lease_id}")

    # -- rules -------------------------------------------------------------------------------

    def count(self, action: str) -> None:
        self.record.steps += 1
        self.record.rules[action] += 1

    # What happens at a step, by weight: jobs work most, ingestion and readers often, the
    # lifecycle (restart, stop, abort, rollback) now and then.
    ACTIONS = ("step", "step", "step", "step", "ingest", "read", "step", "ingest", "read",
               "hold", "round", "round", "burst", "ingest", "read", "read", "read", "restart",
               "restart", "stop", "abort", "rollback")
    NEEDS_RUNNING = {"step", "hold", "round", "burst", "stop"}

    @rule(data=st.data())
    def act(self, data: st.DataObject) -> None:
        action = data.draw(st.sampled_from(self.ACTIONS), label="action")
        if action in self.NEEDS_RUNNING and not self.running():
            action = "restart"
        if action == "abort" and not any(self.jobs[n].held for n in self.running()):
            action = "step" if self.running() else "restart"
        if action == "rollback" and not self.profile.rollbacks:
            action = "read"
        self.count(action)
        if action == "step":
            self.step(self.pick_running(data))
        elif action == "hold":
            self.step(self.pick_running(data), commit=False)
        elif action == "ingest":
            self.ingest(data)
        elif action == "read":
            self.read_versions(data)
        else:
            getattr(self, {"stop": "stop_job"}.get(action, action))(data)

    def ingest(self, data: st.DataObject) -> None:
        """A root completes a barrier (new data or a heartbeat); time passes."""
        root = data.draw(st.sampled_from(self.roots), label="root")
        self.clock.advance(data.draw(st.sampled_from([1, 5, 20]), label="time"))
        self.report(root, data.draw(st.integers(0, 4), label="heartbeat") == 0)

    def pick_running(self, data: st.DataObject) -> str:
        weighted = [n for n in self.running() for _ in range(self.jobs[n].spec.weight)]
        return data.draw(st.sampled_from(weighted), label="job")

    def burst(self, data: st.DataObject) -> None:
        """Ingestion and one job race ahead of the others."""
        name = self.pick_running(data)
        for _ in range(data.draw(st.integers(2, 4), label="burst")):
            for root in self.roots:
                if data.draw(st.booleans(), label="root moves"):
                    self.clock.advance(3)
                    self.report(root, False)
            self.step(name)
            self.step(name)

    def round(self, data: st.DataObject) -> None:
        """Every running job takes a step, in a drawn order."""
        for name in data.draw(st.permutations(self.running()), label="order"):
            self.step(name)

    def stop_job(self, data: st.DataObject) -> None:
        self.stop(data.draw(st.sampled_from(self.running()), label="job"))

    def restart(self, data: st.DataObject) -> None:
        """A job starts again (after stopping it when it runs) with a drawn ``from``."""
        name = data.draw(st.sampled_from(sorted(self.jobs)), label="job")
        if self.jobs[name].running:
            self.stop(name)
        kind = data.draw(st.sampled_from(self.profile.starts), label="from")
        start_from: str | int = kind
        if kind == "barrier":
            known = self.history.candidates(self.jobs[name].spec.sources)
            if known:
                start_from = data.draw(st.sampled_from(known), label="barrier")
            else:
                start_from = data.draw(st.integers(START_MS - 10, self.clock.now_ms()),
                                       label="barrier")
        self.start(name, start_from)

    def abort(self, data: st.DataObject) -> None:
        """A job gives up the barrier it holds; asked again, it gets it again."""
        name = data.draw(st.sampled_from([n for n in self.running() if self.jobs[n].held]),
                         label="job")
        driver = self.jobs[name]
        barrier = driver.held["barrier"]  # type: ignore[index]
        self.call("POST", f"/jobs/{name}/barriers/{barrier}/abort", {"reason": "model"},
                  allowed=("unknown_barrier",) if driver.stale else ())
        driver.held = None

    def affected_by(self, table: str) -> set[str]:
        """docs/contract.md#lineage-and-rollback and docs/decisions.md: T, the other sinks of T's
        writer, every table downstream of those through running jobs."""
        h = self.history
        affected = {table}
        writer = h.writer(table)
        if writer is not None:
            affected |= set(h.jobs[writer][1])
        frontier = list(affected)
        while frontier:
            t = frontier.pop()
            for sources, sinks in h.jobs.values():
                if t in sources:
                    for k in sinks - affected:
                        affected.add(k)
                        frontier.append(k)
        return affected

    def rollback(self, data: st.DataObject) -> None:
        """A table is revised at one of its barriers: plan, apply, complete."""
        h = self.history
        revisable = [t for t in self.tables() if len(h.completed(t)) >= 2]
        if not revisable:
            return
        table = data.draw(st.sampled_from(revisable), label="table")
        barrier = data.draw(st.sampled_from(h.completed(table)[:-1]), label="barrier")
        affected = self.affected_by(table)
        plan = self.call("POST", "/rollback-plans", {"table": table, "barrier": barrier})
        if plan.status_code != 201:
            return
        planned = {t["table"] for t in plan.json()["tables"]}
        self.check(planned == affected, "rollback_plan",
                   f"rollback {table} at {barrier}: plan {sorted(planned)}, "
                   f"expected {sorted(affected)}")
        plan_id = plan.json()["id"]
        if self.call("POST", f"/rollback-plans/{plan_id}/apply").status_code != 200:
            return
        for t in planned:
            h.roll_back(t, barrier)
        for driver in self.jobs.values():
            if driver.running and driver.spec.sink in planned:
                driver.stale = True
        self.strong_served.clear()  # strong cuts may move back across an applied rollback
        self.strong_served_table.clear()
        self.call("POST", f"/rollback-plans/{plan_id}/complete")

    def read_versions(self, data: st.DataObject) -> None:
        consistency = data.draw(st.sampled_from(["strong", "strong", "weak", "barrier"]),
                                label="consistency")
        single = data.draw(st.booleans(), label="single")
        lease = data.draw(st.integers(0, 3), label="lease") == 0
        with_barriers = [t for t in self.tables() if self.history.latest(t) is not None]
        if not with_barriers:
            return
        if single and consistency != "barrier":
            self.read_one(consistency, data.draw(st.sampled_from(with_barriers), label="table"))
            return
        tables = data.draw(st.lists(st.sampled_from(with_barriers), min_size=1, max_size=4,
                                    unique=True), label="tables")
        barrier = None
        if consistency == "barrier":
            known = self.history.candidates(
                set().union(*(self.history.component(t) for t in tables)))
            barrier = data.draw(st.sampled_from(known), label="barrier")
        self.read(consistency, tables, barrier, lease=lease and consistency != "barrier")

    # -- the end -----------------------------------------------------------------------------

    def teardown(self) -> None:
        if not self.failed:
            self.drain()

    def drain(self) -> None:
        """Ingestion stops with a heartbeat of every root (every table no running job writes)
        at one final barrier F; every running job asks and commits until it waits; then every
        table's strong version is F."""
        h = self.history
        self.clock.advance(1_000)
        final = self.clock.now_ms()
        for table in self.tables():
            if h.writer(table) is None:
                self.report(table, heartbeat=True, barrier=final)
        for _ in range(40):
            actions = [self.step(name) for name in self.running()]
            if all(a == "wait" for a in actions):
                break
        else:
            self.violation("drain", f"jobs still busy after 40 rounds: {actions}")
        self.record.drains += 1
        for table in self.tables():
            response = self.http.get(f"/version/strong/{path(table)}")
            body = response.json()
            self.check(response.status_code == 200 and body.get("barrier") == final
                       and body.get("snapshot_id") == h.snap(table, final), "drain",
                       f"{table}: strong {body} after the drain to {final}; "
                       f"{self.describe(h.component(table))}")
