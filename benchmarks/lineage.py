"""``GET /lineage`` (the whole topology) on a 1,000-table, 1,000-job pipeline graph.

100 pipelines of 10 tables, each fed by an ingestion job, each downstream job reading its own
pipeline's previous table and that of the next two pipelines (fan-in: 2,700 table → job → table
edges, one connected graph), all running; bulk-loaded into a fresh, migrated database on
PostgreSQL and on SQLite. One ``metaservice serve`` process answers one keep-alive connection
of the load generator (``benchmarks/_loadgen.py``) over loopback, one request after the other.
Goal: well under 100 ms (judged as p99 < 100 ms).

Also measured, without a goal: ``GET /lineage/{table}?direction=both`` for a table in the middle
of the graph, and the first ``GET /lineage`` after the topology changed (cache reload).
"""

from __future__ import annotations

import time

import httpx

from benchmarks import _environment as environment
from benchmarks import _topology as topology
from benchmarks._report import Result, percentile

CHAINS, LENGTH, CROSS_LINKS = 100, 10, 2


def _timed_get(client: httpx.Client, path: str) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    response = client.get(path)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"GET {path} answered {response.status_code}: {response.text[:300]}")
    return elapsed, response


def measure(backend: str, seconds: float) -> dict[str, float | int]:
    database = (environment.postgres_schema("lineage") if backend == "postgresql"
                else environment.sqlite_file("lineage"))
    with database as url:
        pipelines = topology.load(url, chains=CHAINS, length=LENGTH, barriers_per_table=10,
                                  cross_links=CROSS_LINKS)
        with environment.server_processes(url, count=1) as (server,), \
                httpx.Client(base_url=server.url, timeout=60) as client:
            cold_ms, response = _timed_get(client, "/lineage")
            body = response.json()
            if len(body["tables"]) != CHAINS * LENGTH or len(body["jobs"]) != pipelines.jobs:
                raise RuntimeError(f"unexpected topology: {len(body['tables'])} tables, "
                                   f"{len(body['jobs'])} jobs")
            full, cpu_ms = server.sequential("/lineage", seconds)
            middle, _ = server.sequential(f"/lineage/lake/p{CHAINS // 2}/t{LENGTH // 2}"
                                          "?direction=both", seconds / 2)
    return {"p50": percentile(full, 50), "p99": percentile(full, 99), "cold": cold_ms,
            "cpu": cpu_ms, "bytes": len(response.content), "edges": len(body["edges"]),
            "jobs": len(body["jobs"]), "middle_p50": percentile(middle, 50),
            "middle_p99": percentile(middle, 99), "samples": len(full)}


def run(quick: bool) -> list[Result]:
    seconds = 3.0 if quick else 15.0
    backends = ["postgresql", "sqlite"] if environment.postgres_reachable() else ["sqlite"]
    results = []
    for backend in backends:
        m = measure(backend, seconds)
        label = "PostgreSQL" if backend == "postgresql" else "SQLite"
        results.append(Result.absolute(
            f"GET /lineage p99, 1,000 tables / {m['jobs']:,} jobs ({label})", float(m["p99"]),
            "ms", goal="well under 100 ms (p99 < 100 ms)", met_if=lambda v: v < 100,
            notes=f"p50 {m['p50']:.1f} ms over {m['samples']} sequential requests, server CPU "
                  f"{m['cpu']:.1f} ms per request; {m['edges']:,} edges, "
                  f"{m['bytes'] / 1024:.0f} KiB answer; first request (topology cache "
                  f"load) {m['cold']:.0f} ms; GET /lineage/{{table}}?direction=both, middle "
                  f"table: p50 {m['middle_p50']:.1f} ms, p99 {m['middle_p99']:.1f} ms"))
    return results


if __name__ == "__main__":
    from benchmarks._report import text_table

    print(text_table(run(quick=True)))
