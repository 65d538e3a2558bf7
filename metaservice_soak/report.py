"""What a soak run measured, judged and written down: read from the state directory (the
roles' events, the faults, the holds, the restarts, haproxy's log) and the final check, into a
:class:`Report`; printed, and written into ``docs/reliability.md``'s generated section (one
block per backend, between ``<!-- soak:BACKEND -->`` markers; prose outside them is kept).

A run passes when the final check passes, no reader but the head reader saw the invariant
broken, no row was lost or doubled, every fault planned happened, and every 5xx is explained.
Three 5xx are explained. A 503 while the database was down: from a database crash's start to
``DATABASE_GRACE_SECONDS`` after it was up again (servers answer 503 ``database_unavailable``
then, the right answer). A 503 while the object store was down (``--storage s3``): from a store
kill's start to ``STORE_GRACE_SECONDS`` after it served again (503
``object_store_unavailable``). And haproxy's 502 for a lease release in flight on a replica killed
under it (within ``KILLED_REPLICA_GRACE_SECONDS`` of the kill): haproxy replays no release
(``deploy/haproxy/haproxy.cfg``: a replay of one that was done would answer 404), and the
client's own retry answers it (``release_lease`` takes an unknown lease as released).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaservice_soak.faults import (
    DATABASE_CRASH,
    DRIVER_KILL,
    LEADER_FAILOVER,
    SERVER_KILL,
    STORE_KILL,
    FaultLog,
    FaultRecord,
)

DATABASE_GRACE_SECONDS = 10.0
# a request that met the object store killed is answered 503 within the servers' timeouts to it
# (the harness's STORE_CONNECT_SECONDS + STORE_REQUEST_SECONDS) and a margin
STORE_GRACE_SECONDS = 15.0
KILLED_REPLICA_GRACE_SECONDS = 2.0
HEAD_READER = "reader_head"
BEGIN, END = "<!-- soak:begin -->", "<!-- soak:end -->"
BLOCK = re.compile(r"<!-- soak:(?P<name>[a-z]+) -->\n.*?<!-- /soak:(?P=name) -->\n", re.S)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """A JSON-lines file; a line cut short by a SIGKILL (the last one) is left out."""
    if not path.exists():
        return []
    found = []
    for line in path.read_text(errors="replace").splitlines():
        if line.strip():
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found


def role_events(state: Path) -> dict[str, list[dict[str, Any]]]:
    return {path.stem: read_jsonl(path) for path in sorted((state / "events").glob("*.jsonl"))}


def _total(figure: Any) -> int:
    """A count, or the sum of a per-table mapping of counts."""
    if isinstance(figure, dict):
        return sum(_total(v) for v in figure.values())
    if isinstance(figure, list):
        return len(figure)
    return int(figure or 0)


@dataclass
class FaultOutcome:
    record: FaultRecord
    recovery_seconds: float | None  # first successful barrier anywhere after the fault began
    role_recovery_seconds: float | None = None  # a killed driver's own first commit after


@dataclass
class HoldOutcome:
    job: str | None
    holder_table: str
    since: float  # unix seconds: the server's "since" (the job's start), else first seen
    until: float
    tables: list[str]

    @property
    def seconds(self) -> float:
        return self.until - self.since


@dataclass
class Report:
    backend: str
    minutes: float
    seed: int
    wall_seconds: float
    live_seconds: float | None
    ingest_seconds: float | None
    drain_seconds: float | None
    rows_ingested: int
    rows_by_role: dict[str, int]
    barriers_by_table: dict[str, int]
    faults_by_kind: dict[str, int]
    faults_planned: int
    reads_by_engine: dict[str, int]
    unavailable_by_engine: dict[str, int]  # reads the engine could not make (no cut yet, ...)
    violations: list[dict[str, Any]]
    head_reads: int
    head_breaks: int
    rows_lost: int | None
    rows_doubled: int | None
    lost_by_table: Any
    doubled_by_table: Any
    server_errors: list[dict[str, Any]]  # unexplained 5xx
    unavailable_while_down: int
    releases_on_killed_replica: int  # haproxy's 502 for a lease release in flight on it
    haproxy_redispatched: int | None
    haproxy_errors: int | None
    largest_strong_lag_ms: int | None
    largest_strong_lag_table: str | None
    faults: list[FaultOutcome]
    holds: list[HoldOutcome]
    holds_at_start: int
    unexpected_exits: dict[str, int]
    role_errors: dict[str, int]
    final: dict[str, Any] | None
    failure: str | None
    machine: dict[str, str] = field(default_factory=dict)
    patroni: bool = False
    strong_backwards: list[dict[str, Any]] = field(default_factory=list)
    storage: str = "local"

    @property
    def block(self) -> str:
        """The name of its block in the generated section: one per backend and set-up."""
        return ("patroni" if self.patroni else self.backend) + (
            "-s3" if self.storage == "s3" else "")

    @property
    def problems(self) -> list[str]:
        found = []
        if self.failure:
            found.append(self.failure)
        if self.final is None:
            found.append("no final check")
        elif not self.final.get("ok"):
            found.append("the final check failed")
        if self.violations:
            found.append(f"{len(self.violations)} invariant violations")
        if self.rows_lost:
            found.append(f"{self.rows_lost} rows lost")
        if self.rows_doubled:
            found.append(f"{self.rows_doubled} rows doubled")
        if self.server_errors:
            found.append(f"{len(self.server_errors)} unexplained 5xx")
        if self.strong_backwards:
            found.append(f"{len(self.strong_backwards)} strong cuts moved backwards")
        if len(self.faults) < self.faults_planned:
            found.append(f"{len(self.faults)} of {self.faults_planned} planned faults were "
                         "injected")
        failed = [f for f in self.faults if "error" in f.record.detail]
        if failed:
            found.append(f"{len(failed)} faults could not be injected")
        return found

    @property
    def passed(self) -> bool:
        return not self.problems


# -- building ------------------------------------------------------------------------------

def _outage_windows(faults: list[FaultRecord]) -> list[tuple[float, float]]:
    """When a 503 is the right answer: the database or the object store was down."""
    return ([(f.t, f.t_end + DATABASE_GRACE_SECONDS) for f in faults
             if f.kind in (DATABASE_CRASH, LEADER_FAILOVER)]
            + [(f.t, f.t_end + STORE_GRACE_SECONDS) for f in faults if f.kind == STORE_KILL])


def _explained(error: dict[str, Any], windows: list[tuple[float, float]]) -> bool:
    return error.get("status") == 503 and any(a <= error.get("t", 0) <= b for a, b in windows)


def _killed_replica_windows(faults: list[FaultRecord]) -> list[tuple[float, float]]:
    return [(f.t, f.t + KILLED_REPLICA_GRACE_SECONDS) for f in faults if f.kind == SERVER_KILL]


def _release_on_killed_replica(error: dict[str, Any],
                               windows: list[tuple[float, float]]) -> bool:
    return (error.get("status") == 502 and error.get("method") == "DELETE"
            and str(error.get("path", "")).startswith("/leases/")
            and any(a <= error.get("t", 0) <= b for a, b in windows))


def _haproxy_figures(log: Path | None) -> tuple[int | None, int | None]:
    """Requests haproxy sent to another replica (a ``+`` before the retry count), and the 5xx
    it answered itself (termination state other than ``----``)."""
    if log is None or not log.exists():
        return None, None
    redispatched = errors = 0
    line_re = re.compile(r'\] \S+ \S+ \S+ (?P<status>\d{3}) .* (?P<term>\S{4}) '
                         r'\d+/\d+/\d+/\d+/(?P<retries>\+?\d+) ')
    for line in log.read_text(errors="replace").splitlines():
        match = line_re.search(line)
        if match is None:
            continue
        if match["retries"].startswith("+"):
            redispatched += 1
        if match["status"].startswith("5") and match["term"] != "----":
            errors += 1
    return redispatched, errors


def _commit_times(events: dict[str, list[dict[str, Any]]]) -> list[tuple[float, str]]:
    return sorted((e["t"], role) for role, lines in events.items() for e in lines
                  if e.get("kind") in ("commit", "acked"))


def _fault_outcomes(faults: list[FaultRecord],
                    commits: list[tuple[float, str]]) -> list[FaultOutcome]:
    outcomes = []
    for fault in sorted(faults, key=lambda f: f.t):
        # a failover's first write is counted from the fault but found only once the new
        # leader was elected: a frozen leader's PostgreSQL still commits until haproxy finds
        # its Patroni silent, and those commits are not the new leader's
        since = fault.t + float(fault.detail.get("elected_after", 0.0))
        anywhere = next((t for t, _ in commits if t > since), None)
        own = None
        if fault.kind == DRIVER_KILL:
            own = next((t for t, role in commits if t > fault.t and role == fault.target), None)
        outcomes.append(FaultOutcome(fault, None if anywhere is None else anywhere - fault.t,
                                     None if own is None else own - fault.t))
    return outcomes


def _holds(state: Path, live: float | None) -> tuple[list[HoldOutcome], int]:
    """The holds seen once the pipeline was live, and how many ended before (while the
    pipeline's tables were catching up at its start: every one of them holds the cut then)."""
    holds = []
    at_start = 0
    for line in read_jsonl(state / "holds.jsonl"):
        if live is not None and line["last_seen"] < live:
            at_start += 1
            continue
        since = line["since_ms"] / 1000 if line.get("since_ms") else line["first_seen"]
        holds.append(HoldOutcome(line.get("job"), line["holder_table"], since,
                                 line["last_seen"], line.get("tables", [])))
    return sorted(holds, key=lambda h: h.since), at_start


def _restarts(state: Path) -> dict[str, int]:
    """Exits no fault and no stop caused: a role that failed by itself."""
    exits: Counter[str] = Counter()
    for line in read_jsonl(state / "restarts.jsonl"):
        if line.get("event") == "exited" and line.get("status") not in (0, None):
            exits[line["role"]] += 1
    return dict(exits)


def build(outcome: Any) -> Report:
    """The report of a :class:`metaservice_soak.harness.SoakOutcome`."""
    state: Path = outcome.state
    events = role_events(state)
    faults = FaultLog(state / "faults.jsonl").read()
    final = outcome.final
    rows_by_role = {role: sum(len(e.get("ids", [])) for e in lines if e.get("kind") == "acked")
                    for role, lines in events.items()
                    if any(e.get("kind") == "acked" for e in lines)}
    barriers: dict[str, set[int]] = defaultdict(set)
    reads: Counter[str] = Counter()
    unavailable: Counter[str] = Counter()
    violations = []
    head_reads = head_breaks = 0
    errors_5xx = []
    role_errors: Counter[str] = Counter()
    for role, lines in events.items():
        for e in lines:
            kind = e.get("kind")
            if kind in ("commit", "acked") and e.get("barrier") is not None:
                barriers[e["table"]].add(e["barrier"])
            elif kind == "read":
                if role == HEAD_READER:
                    head_reads += 1
                    head_breaks += not e.get("ok")
                else:
                    reads[str(e.get("engine", role))] += 1
                    if not e.get("ok"):
                        violations.append({"role": role, **e})
            elif kind == "unavailable":
                unavailable[str(e.get("engine", role))] += 1
            elif kind == "http_5xx":
                errors_5xx.append({"role": role, **e})
            elif kind == "error":
                role_errors[role] += 1
    errors_5xx += [{"role": "harness monitor", **e} for e in read_jsonl(state / "monitor.jsonl")]
    windows = _outage_windows(faults)
    kills = _killed_replica_windows(faults)
    releases = [e for e in errors_5xx if _release_on_killed_replica(e, kills)]
    unexplained = [e for e in errors_5xx
                   if not _explained(e, windows) and not _release_on_killed_replica(e, kills)]
    redispatched, haproxy_errors = _haproxy_figures(outcome.haproxy_log)
    holds, holds_at_start = _holds(state, outcome.live)
    ended = outcome.ended or outcome.started
    return Report(
        backend=outcome.config.backend, minutes=outcome.config.minutes,
        seed=outcome.config.seed, wall_seconds=ended - outcome.started,
        live_seconds=outcome.live - outcome.started if outcome.live else None,
        ingest_seconds=(outcome.ingest_stopped - outcome.live
                        if outcome.ingest_stopped and outcome.live else None),
        drain_seconds=(outcome.drained - outcome.ingest_stopped
                       if outcome.drained and outcome.ingest_stopped else None),
        rows_ingested=(int(final["rows_ingested"]) if final and "rows_ingested" in final
                       else sum(rows_by_role.values())),
        rows_by_role=rows_by_role,
        barriers_by_table={t: len(b) for t, b in sorted(barriers.items())},
        faults_by_kind=dict(Counter(f.kind for f in faults if "error" not in f.detail
                                    and "skipped" not in f.detail)),
        faults_planned=len(outcome.faults_planned),
        reads_by_engine=dict(sorted(reads.items())),
        unavailable_by_engine=dict(sorted(unavailable.items())), violations=violations,
        head_reads=head_reads, head_breaks=head_breaks,
        rows_lost=_total(final["rows_lost"]) if final and "rows_lost" in final else None,
        rows_doubled=(_total(final["rows_doubled"]) if final and "rows_doubled" in final
                      else None),
        lost_by_table=final.get("rows_lost") if final else None,
        doubled_by_table=final.get("rows_doubled") if final else None,
        server_errors=unexplained,
        unavailable_while_down=len(errors_5xx) - len(unexplained) - len(releases),
        releases_on_killed_replica=len(releases),
        haproxy_redispatched=redispatched, haproxy_errors=haproxy_errors,
        largest_strong_lag_ms=outcome.largest_strong_lag_ms,
        largest_strong_lag_table=outcome.largest_strong_lag_table,
        faults=_fault_outcomes(faults, _commit_times(events)), holds=holds,
        holds_at_start=holds_at_start,
        unexpected_exits=_restarts(state), role_errors=dict(role_errors), final=final,
        failure=outcome.failure, machine=machine_description(),
        patroni=bool(getattr(outcome.config, "patroni", False)),
        storage=str(getattr(outcome.config, "storage", "local")),
        strong_backwards=list(getattr(outcome, "strong_backwards", []) or []))


def machine_description() -> dict[str, str]:
    memory = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    one, five, fifteen = os.getloadavg()
    return {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "cores": str(os.cpu_count() or "?"), "memory": memory,
            "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(),
            "load average at the end": f"{one:.1f} / {five:.1f} / {fifteen:.1f}"}


# -- rendering -----------------------------------------------------------------------------

def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} s"


def _counts(mapping: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in mapping.items()) or "none"


def render(report: Report) -> str:
    title = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}[report.backend]
    if report.patroni:
        title += " on a Patroni cluster (three members, synchronous_mode), failing over"
    if report.storage == "s3":
        title += ", the lake on S3 (SeaweedFS, killed and restarted)"
    verdict = ("**passed**" if report.passed
               else "**failed**: " + "; ".join(report.problems))
    m = report.machine
    lines = [
        f"### {title}: {report.minutes:g} minutes, seed {report.seed}", "",
        f"`python -m metaservice_soak --minutes {report.minutes:g} --seed {report.seed} "
        f"--backend {report.backend}{' --patroni' if report.patroni else ''}"
        f"{' --storage s3' if report.storage == 's3' else ''}` — "
        f"{m.get('date', '?')}, {m.get('cores', '?')} cores, "
        f"{m.get('memory', '?')}, load average {m.get('load average at the end', '?')} at the "
        f"end. Result: {verdict}.", "",
        "| figure | value |", "|---|---|",
        f"| duration | pipeline live (a first barrier from every ingestion and job) after "
        f"{_seconds(report.live_seconds)}, then {_seconds(report.ingest_seconds)} of ingestion "
        f"with faults, drained {_seconds(report.drain_seconds)} after it stopped; "
        f"{_seconds(report.wall_seconds)} in all (Spark's start included) |",
        f"| rows ingested | {report.rows_ingested:,} ({_counts(report.rows_by_role)}) |",
        f"| barriers completed | {_counts(report.barriers_by_table)} |",
        f"| faults | {_counts(report.faults_by_kind)} (of {report.faults_planned} planned) |",
        f"| reads checked | {_counts(report.reads_by_engine)} (and reads that found no "
        f"consistent cut to read yet: {_counts(report.unavailable_by_engine)}) |",
        f"| invariant violations | {len(report.violations)} |",
        f"| the check can fail | the head reader saw the invariant broken in "
        f"{report.head_breaks:,} of {report.head_reads:,} reads |",
        f"| rows lost | {_dash(report.rows_lost)} |",
        f"| rows doubled | {_dash(report.rows_doubled)} |",
        f"| requests with a 5xx | {len(report.server_errors)} unexplained; "
        f"{report.unavailable_while_down} × 503 while the database was down "
        f"{'or failing over ' if report.patroni else ''}"
        f"{'or the object store was down ' if report.storage == 's3' else ''}"
        + (f"; {report.releases_on_killed_replica} × 502 for a lease release in flight on a "
           "killed replica (not replayed; the client's retry answered it) "
           if report.releases_on_killed_replica else "") + "|",
        f"| strong cuts moving backwards | {len(report.strong_backwards)} (the monitor's "
        "reads of every table's strong version) |",
    ]
    if report.haproxy_redispatched is not None:
        lines.append(f"| haproxy | {report.haproxy_redispatched:,} requests sent on to the "
                     f"other replica; {report.haproxy_errors} 5xx of its own |")
    lag = report.largest_strong_lag_ms
    lines += [
        f"| largest strong-cut lag | "
        f"{'—' if lag is None else f'{lag / 1000:.1f} s ({report.largest_strong_lag_table})'} |",
        f"| final check | {_final(report.final)} |",
        f"| role exits no fault caused | {_counts(report.unexpected_exits)} |",
        f"| role errors logged | {_counts(report.role_errors)} |",
        "", "Faults (recovery: the first barrier completed anywhere after the fault began; for a "
        "killed driver, also its own first commit):", "",
        "| # | at | fault | target | down / held | recovery | the job's own |",
        "|---|---|---|---|---|---|---|",
    ]
    start = report.faults[0].record.t - report.faults[0].record.planned_at if report.faults else 0
    for i, f in enumerate(report.faults, 1):
        r = f.record
        note = (r.detail.get("error") or r.detail.get("skipped")
                or (f"planned: {r.detail['planned']}" if "planned" in r.detail else ""))
        lines.append(f"| {i} | {r.t - start:.0f} s | {r.kind}{f' ({note})' if note else ''} "
                     f"| {r.target} | {r.t_end - r.t:.1f} s | {_seconds(f.recovery_seconds)} "
                     f"| {_seconds(f.role_recovery_seconds) if r.kind == DRIVER_KILL else ''} |")
    failovers = [f for f in report.faults if f.record.kind == LEADER_FAILOVER]
    if failovers:
        lines += ["", "Failovers (elected: until Patroni's `/cluster` named another leader; "
                  "first write: the first barrier any role completed once it had, counted from "
                  "the fault):", "",
                  "| # | at | how | old leader | new leader | elected after | first write after |",
                  "|---|---|---|---|---|---|---|"]
        for f in failovers:
            r, d = f.record, f.record.detail
            lines.append(f"| {report.faults.index(f) + 1} | {r.t - start:.0f} s | {r.target} | "
                         f"{d.get('old', '—')} | {d.get('new', '—')} | "
                         f"{_seconds(d.get('elected_after'))} | "
                         f"{_seconds(f.recovery_seconds)} |")
    lines += ["", "Strong cuts held once the pipeline was live (the server's `held_back_by`: "
              "the job, its catching-up table, since when; "
              f"{report.holds_at_start} more while the pipeline's own tables caught up at its "
              "start):", "",
              "| job | catching-up table | held for | tables held |", "|---|---|---|---|"]
    for h in report.holds:
        lines.append(f"| {h.job} | {h.holder_table} | {h.seconds:.1f} s | "
                     f"{', '.join(h.tables)} |")
    if not report.holds:
        lines.append("| — | — | — | — |")
    if report.server_errors:
        lines += ["", "Unexplained 5xx (first 10):", ""]
        lines += [f"- {e.get('role')}: {e.get('method')} {e.get('path')} → {e.get('status')}"
                  for e in report.server_errors[:10]]
    if report.violations:
        lines += ["", "Invariant violations (first 10):", ""]
        lines += [f"- {v['role']}: {v.get('detail')}" for v in report.violations[:10]]
    return "\n".join(lines) + "\n"


def _dash(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def _final(final: dict[str, Any] | None) -> str:
    if final is None:
        return "not run"
    strong = final.get("strong_at_final") or {}
    behind = [t for t, ok in strong.items() if not ok]
    return (f"{'ok' if final.get('ok') else 'FAILED'}; invariant at the head "
            f"{'holds' if final.get('invariant_at_head') else 'BROKEN'}; strong version at the "
            f"final barrier in {len(strong) - len(behind)} of {len(strong)} tables"
            + (f" (not: {', '.join(behind)})" if behind else ""))


def update_doc(path: Path, report: Report) -> None:
    """Write ``report``'s block into ``path``'s generated section (other blocks and the prose
    outside the section are kept)."""
    text = path.read_text() if path.exists() else (
        "# Reliability\n\nThe chaos soak's reports. The section below is generated by "
        "`python -m metaservice_soak --report docs/reliability.md`; write prose outside it.\n\n")
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        generated, after = rest.split(END, 1)
    else:
        before, generated, after = text.rstrip() + "\n\n", "", "\n"
    blocks = {m["name"]: m.group(0) for m in BLOCK.finditer(generated)}
    blocks[report.block] = (f"<!-- soak:{report.block} -->\n{render(report)}"
                            f"<!-- /soak:{report.block} -->\n")
    section = (f"{BEGIN}\n<!-- generated by `python -m metaservice_soak`; edits here are "
               "overwritten -->\n\n" + "\n".join(blocks[n] for n in sorted(blocks)) + END)
    path.write_text(before + section + after)


def main(argv: list[str] | None = None) -> int:
    """``python -m metaservice_soak.report STATE [--report FILE]``: a finished run's report
    again, from its state directory's ``outcome.json`` and files."""
    import argparse

    from metaservice_soak.harness import SoakOutcome

    parser = argparse.ArgumentParser(prog="python -m metaservice_soak.report")
    parser.add_argument("state", type=Path)
    parser.add_argument("--report", type=Path, help="write it into this file too")
    args = parser.parse_args(argv)
    report = build(SoakOutcome.load(args.state))
    print(render(report))
    if args.report is not None:
        update_doc(args.report, report)
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
