"""Operators' topology queries on a 1,000-table, 1,000-job pipeline graph: ``GET /delay`` (every
table's lag and bottleneck, every job's local lag, p50/p95/p99 of hop and end-to-end latency),
``GET /delay/{table}`` (one lag decomposed hop by hop). ``GET /lineage`` on the same graph is
``benchmarks/lineage.py``.

The graph is ``benchmarks/_topology.py``'s: 100 pipelines of 10 tables, each downstream job
reading its own pipeline's previous table and that of the next two pipelines (2,700 edges, one
component), 10 barriers per table; plus one committed progress record per job and barrier
(9,000 hop latencies). Loaded into a fresh migrated database on PostgreSQL and on SQLite; one
``metaservice serve`` process answers one keep-alive connection of the load generator
(``benchmarks/_loadgen.py``) over loopback, one request after the other, for a fixed time per
series.

The history is moved to end 30 s before the run, so lags are real against the server's clock.
``/delay`` is measured twice: with the default one-hour window, which covers the whole history
(every barrier and hop enters the percentiles: 10,000 + 9,000 samples), and with a one-second
window (no samples), so the cost of the percentiles shows. Goal: ≤ 100 ms (p99).

    python -m benchmarks.topology_queries           # full run, prints the table
    python -m benchmarks topology_queries [--quick] # through the harness (docs/benchmarks.md)
"""

from __future__ import annotations

import json
import random
import time

import httpx
from sqlalchemy import create_engine, insert, select, text

from benchmarks import _environment as environment
from benchmarks import _topology as topology
from benchmarks._report import Result, percentile

CHAINS, LENGTH, CROSS_LINKS, BARRIERS = 100, 10, 2, 10
GOAL_MS = 100.0


def _make_recent(url: str) -> None:
    """Move every time of the loaded history so that its newest barrier is 30 s old: the
    delay answers measure real lags against the server's clock, and the default one-hour
    window covers the whole history."""
    shift = int(time.time() * 1000) - 30_000 - (topology.BASE_BARRIER + (BARRIERS - 1)
                                                 * topology.STEP_MS)
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in (
                "UPDATE barriers SET barrier = barrier + :d, committed_at = committed_at + :d",
                "UPDATE tables SET latest_barrier = latest_barrier + :d, "
                "latest_committed_at = latest_committed_at + :d",
                "UPDATE jobs SET last_committed_barrier = last_committed_barrier + :d",
                "UPDATE job_progress SET barrier = barrier + :d, started_at = started_at + :d, "
                "sources_ready_at = sources_ready_at + :d, finished_at = finished_at + :d",
            ):
                conn.execute(text(statement), {"d": shift})
    finally:
        engine.dispose()


def _add_progress(url: str, pipelines: topology.Pipelines) -> int:
    """One committed progress record per job with sources and per barrier of its sink."""
    from metaservice.db.models import BarrierRow, JobProgressRow, JobTableRow

    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            sinks = dict(conn.execute(select(JobTableRow.job_name, JobTableRow.table_id)
                                      .where(JobTableRow.role == "sink")).all())
            with_sources = set(conn.scalars(select(JobTableRow.job_name)
                                            .where(JobTableRow.role == "source")))
            rng = random.Random(7)
            rows = []
            for job, table_id in sinks.items():
                if job not in with_sources:
                    continue
                for barrier, committed_at in conn.execute(
                        select(BarrierRow.barrier, BarrierRow.committed_at)
                        .where(BarrierRow.table_id == table_id)):
                    ready = committed_at - rng.randrange(1_000, 4_000)
                    rows.append({"job_name": job, "run": 1, "barrier": barrier,
                                 "state": "committed", "started_at": ready + 50,
                                 "sources_ready_at": ready, "finished_at": committed_at,
                                 "attempts": 1, "snapshots": {}, "previous": {}})
            for start in range(0, len(rows), 2000):
                conn.execute(insert(JobProgressRow), rows[start:start + 2000])
            return len(rows)
    finally:
        engine.dispose()


def _timed(client: httpx.Client, path: str, params: dict | None = None) -> tuple[float, bytes]:
    started = time.perf_counter()
    response = client.get(path, params=params)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"GET {path} answered {response.status_code}: {response.text[:300]}")
    return elapsed, response.content


def measure(backend: str, seconds: float) -> dict[str, object]:
    database = (environment.postgres_schema("topoq") if backend == "postgresql"
                else environment.sqlite_file("topoq"))
    with database as url:
        pipelines = topology.load(url, chains=CHAINS, length=LENGTH, barriers_per_table=BARRIERS,
                                  cross_links=CROSS_LINKS)
        hops = _add_progress(url, pipelines)
        _make_recent(url)
        everything = 3600  # the default window: the whole (shifted) history
        last = f"/delay/lake/p{CHAINS // 2}/t{LENGTH - 1}"
        with environment.server_processes(url, count=1) as (server,), \
                httpx.Client(base_url=server.url, timeout=60) as client:
            cold, body = _timed(client, "/delay", {"window_seconds": everything})
            delay = json.loads(body)
            if len(delay["tables"]) != CHAINS * LENGTH or len(delay["jobs"]) != pipelines.jobs:
                raise RuntimeError(f"unexpected answer: {len(delay['tables'])} tables, "
                                   f"{len(delay['jobs'])} jobs")
            samples_in = (sum(t["end_to_end_latency_ms"]["count"] for t in delay["tables"]),
                          sum(j["hop_latency_ms"]["count"] for j in delay["jobs"]))
            hops_in_path = len(json.loads(_timed(client, last)[1])["path"])
            full, cpu_full = server.sequential(f"/delay?window_seconds={everything}", seconds)
            hour, cpu_hour = server.sequential("/delay?window_seconds=1", seconds)
            one, _ = server.sequential(f"{last}?window_seconds={everything}", seconds)
    return {"delay_full": full, "delay_hour": hour, "table": one,
            "cold": cold, "cpu_full": cpu_full, "cpu_hour": cpu_hour, "bytes": len(body),
            "samples_in": samples_in, "hops": hops,
            "path": hops_in_path, "jobs": pipelines.jobs}


def run(quick: bool) -> list[Result]:
    seconds = 3.0 if quick else 15.0
    backends = ["postgresql", "sqlite"] if environment.postgres_reachable() else ["sqlite"]
    results: list[Result] = []
    for backend in backends:
        m = measure(backend, seconds)
        label = "PostgreSQL" if backend == "postgresql" else "SQLite"
        size = f"1,000 tables / {m['jobs']:,} jobs ({label})"

        def p(series: str, q: float, m: dict[str, object] = m) -> float:
            return percentile(m[series], q)  # type: ignore[arg-type]

        e2e, hop = m["samples_in"]  # type: ignore[misc]
        results += [
            Result.absolute(
                f"GET /delay p99, 1 h window (19,000 latency samples), {size}", p("delay_full", 99),
                "ms", goal="≤ 100 ms", met_if=lambda v: v <= GOAL_MS,
                notes=f"p50 {p('delay_full', 50):.1f} ms over {len(m['delay_full'])} "  # type: ignore[arg-type]
                      f"sequential requests; percentiles over {e2e:,} end-to-end and {hop:,} hop "
                      "samples; "
                      f"server CPU {m['cpu_full']:.1f} ms per request; answer "
                      f"{m['bytes'] / 1024:.0f} KiB; first request {m['cold']:.0f} ms"),
            Result.absolute(
                f"GET /delay p99, 1 s window (no samples), {size}", p("delay_hour", 99),
                "ms", goal="≤ 100 ms", met_if=lambda v: v <= GOAL_MS,
                notes=f"p50 {p('delay_hour', 50):.1f} ms, server CPU {m['cpu_hour']:.1f} ms per "
                      "request"),
            Result.absolute(
                f"GET /delay/{{table}} p99, last table of a pipeline, {size}", p("table", 99),
                "ms", goal="≤ 100 ms", met_if=lambda v: v <= GOAL_MS,
                notes=f"p50 {p('table', 50):.1f} ms; {m['path']} hops decomposed, bottleneck "
                      "among every upstream job"),
        ]
    return results


if __name__ == "__main__":
    import sys

    from benchmarks.__main__ import main

    sys.exit(main(["topology_queries", *sys.argv[1:]]))
