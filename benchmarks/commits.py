"""Barrier commit throughput on PostgreSQL next to pgbench doing the same database work.

MetaService side: 1,000 root tables (``lake.ingest.t<i>``) in a fresh, migrated schema; N
concurrent keep-alive HTTP connections (``benchmarks/_loadgen.py``) each report root snapshots
(``POST /tables/lake/ingest/t<i>/barriers`` with a new snapshot id, the barrier assigned by the
service) to their own share of the tables, spread over one or more ``metaservice serve``
processes on the same database. Every answer is a durable commit
(docs/contract.md#durable-and-race-free-writes).

Baseline: ``pgbench`` on the same machine, same PostgreSQL, same schema, same number of clients,
in the same run, with a custom script running the equivalent transaction: the five statements
the service runs for a root report, in the same order, prepared (``PGBENCH_SCRIPT``). Goal:
MetaService ≥ 50 % of pgbench's TPS. The best configuration of each side is compared; all are
in the notes, with the server's CPU time per commit and, for scale, the throughput of
``GET /healthz`` (no database work) on the same server: the ceiling of the HTTP framework on
this machine.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import tempfile
from dataclasses import dataclass

from benchmarks import _environment as environment
from benchmarks._loadgen import run_load
from benchmarks._report import Result, percentile

TABLES = 1000
BASE_BARRIER = 1_700_000_000_000

# The statements of a root report (metaservice/repositories/barriers.py, the commit path), in
# order, with the same parameters: find the table, lock its row, read the fence, the row at the
# barrier and whether the snapshot was recorded already, insert the barrier row, move
# ``latest(T)`` forward (compare-and-swap). The barrier is the next after ``latest(T)`` here;
# the service takes the clock's time when it is later, as root reports do.
PGBENCH_SCRIPT = """\
\\set t :first_id + :client_id + :clients * random(0, :per_client - 1)
\\set i :t - :first_id
\\set s random(1, 9223372036854775806)
BEGIN;
SELECT id, catching_up FROM tables
  WHERE catalog = 'lake' AND database = 'ingest' AND name = 't' || :i;
SELECT latest_barrier AS latest, latest_snapshot_id, writer_job, catching_up FROM tables
  WHERE id = :t FOR UPDATE \\gset
\\set b :latest + 1
SELECT (SELECT plan_id FROM rollback_fences WHERE table_id = :t LIMIT 1),
       (SELECT barrier FROM barriers WHERE table_id = :t AND snapshot_id = :s
          AND rolled_back IS false ORDER BY barrier DESC LIMIT 1),
       existing.snapshot_id, existing.rolled_back, existing.writer_job
  FROM (SELECT 1 AS one) AS one
  LEFT OUTER JOIN barriers AS existing ON existing.table_id = :t AND existing.barrier = :b;
INSERT INTO barriers (table_id, barrier, snapshot_id, committed_at, writer_job, writer_run,
                      rolled_back)
  VALUES (:t, :b, :s, :b, NULL, NULL, false);
UPDATE tables SET latest_barrier = :b, latest_snapshot_id = :s, latest_committed_at = :b
  WHERE id = :t AND (latest_barrier IS NULL OR latest_barrier < :b);
END;
"""


@dataclass
class Run:
    label: str
    tps: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    server_cpu_ms: float | None = None  # server CPU per commit, all processes
    errors: int = 0
    first_error: str | None = None


def create_tables(database_url: str) -> int:
    """The root tables, each with a latest barrier (PostgreSQL or SQLite); returns the first
    table id."""
    from sqlalchemy import text

    from metaservice.db.engine import build_engine

    rng = random.Random(5)
    engine = build_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO tables (catalog, database, name, created_at, latest_barrier, "
                "latest_snapshot_id, latest_committed_at, catching_up) "
                "VALUES ('lake', 'ingest', :name, :b, :b, :s, :b, :no)"),
                [{"name": f"t{i}", "b": BASE_BARRIER, "s": rng.getrandbits(62), "no": False}
                 for i in range(TABLES)])
            first, last = conn.execute(text(
                "SELECT min(id), max(id) FROM tables WHERE database = 'ingest'")).one()
        if engine.dialect.name == "postgresql":
            # Statistics, as autovacuum would gather them in a deployment: without them the
            # planner reads a group's tables by (catalog, database) and filters 1,000 rows.
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("ANALYZE tables"))
    finally:
        engine.dispose()
    assert last - first + 1 == TABLES, "table ids are not contiguous"
    return int(first)


def measure_metaservice(database_url: str, processes: int, clients: int, warmup: float,
                        duration: float, *, healthz: bool = False) -> Run:
    """Root reports, or with ``healthz`` the same load of ``GET /healthz`` (no database)."""
    per_client = TABLES // clients
    rng = random.Random(processes * 1000 + clients)

    def make(client: int, n: int) -> tuple[str, str, bytes]:
        if healthz:
            return "GET", "/healthz", b""
        table = client + clients * (n % per_client)
        body = json.dumps({"snapshot_id": rng.getrandbits(62)}).encode()
        return "POST", f"/tables/lake/ingest/t{table}/barriers", body

    with environment.server_processes(database_url, count=processes) as servers:
        cpu_before = sum(s.cpu_seconds() for s in servers)
        result = run_load([s.url for s in servers], clients=clients, make=make, warmup=warmup,
                          duration=duration)
        cpu = sum(s.cpu_seconds() for s in servers) - cpu_before
    lat = result.latencies_ms
    what = "GET /healthz" if healthz else "MetaService"
    return Run(f"{what}, {processes} process{'es' if processes > 1 else ''}, "
               f"{clients} clients", result.per_second,
               percentile(lat, 50) if lat else None, percentile(lat, 99) if lat else None,
               cpu * 1000 / max(result.answered, 1),
               result.failed, result.first_error)


def measure_pgbench(database_url: str, first_id: int, clients: int, duration: float) -> Run:
    """pgbench is found as the private cluster's programs are: on PATH, else in Debian's
    /usr/lib/postgresql/*/bin (it comes with the server's package)."""
    from metaservice_soak.postgres import ClusterError, server_binary

    try:
        pgbench = server_binary("pgbench")
    except ClusterError as exc:
        raise RuntimeError(str(exc)) from exc
    url = environment.libpq_url(database_url)
    schema = re.search(r"search_path%3D(\w+)", url)
    base = url.split("?", 1)[0]
    env = {**os.environ, "PGOPTIONS": f"-c search_path={schema.group(1)}" if schema else ""}
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(PGBENCH_SCRIPT)
    try:
        out = subprocess.run(
            [pgbench, "-n", "-M", "prepared", "-c", str(clients), "-j", "2", "-T",
             str(int(duration)), "-D", f"first_id={first_id}", "-D", f"clients={clients}",
             "-D", f"per_client={TABLES // clients}", "-f", script.name, base],
            env=env, capture_output=True, text=True, timeout=duration + 120, check=False)
    finally:
        os.unlink(script.name)
    match = re.search(r"tps = ([\d.]+)", out.stdout)
    if out.returncode != 0 or match is None:
        detail = (out.stderr or out.stdout)[-500:]
        raise RuntimeError(f"pgbench failed ({out.returncode}): {detail}")
    failed = re.search(r"number of failed transactions: (\d+)", out.stdout)
    latency = re.search(r"latency average = ([\d.]+) ms", out.stdout)
    return Run(f"pgbench, {clients} clients", float(match.group(1)),
               p50_ms=float(latency.group(1)) if latency else None,
               errors=int(failed.group(1)) if failed else 0)


def run(quick: bool) -> list[Result]:
    if not environment.postgres_reachable():
        return [Result("barrier commits/s (PostgreSQL)", None, "commits/s",
                       notes="PostgreSQL unreachable: skipped")]
    warmup, duration = (1.0, 5.0) if quick else (2.0, 12.0)
    configurations = [(2, 16)] if quick else [(1, 16), (2, 16), (2, 32), (4, 32)]
    pgbench_clients = [16] if quick else [16, 32]
    with environment.postgres_schema("commits") as url:
        first_id = create_tables(url)
        baselines = [measure_pgbench(url, first_id, pgbench_clients[0], duration)]
        services = {c: measure_metaservice(url, *c, warmup, duration) for c in configurations}
        baselines += [measure_pgbench(url, first_id, c, duration) for c in pgbench_clients[1:]]
        best = max(services, key=lambda c: services[c].tps)
        ceiling = measure_metaservice(url, *best, warmup, duration, healthz=True)
    runs = [baselines[0], *services.values(), *baselines[1:], ceiling]
    service = services[best]
    baseline = max(baselines, key=lambda r: r.tps)

    def describe(r: Run) -> str:
        extra = []
        if r.p50_ms is not None:
            extra.append(f"p50 {r.p50_ms:.1f} ms" if r.p99_ms is not None
                         else f"mean latency {r.p50_ms:.1f} ms")
        if r.p99_ms is not None:
            extra.append(f"p99 {r.p99_ms:.1f} ms")
        if r.server_cpu_ms is not None:
            extra.append(f"server CPU {r.server_cpu_ms:.2f} ms/request")
        if r.errors:
            extra.append(f"{r.errors} errors ({r.first_error or ''})")
        return f"{r.label}: {r.tps:,.0f}/s ({', '.join(extra)})"

    errors = sum(r.errors for r in runs if r.label.startswith("MetaService"))
    return [Result.compare(
        "barrier commits/s, PostgreSQL (root reports over HTTP)", service.tps, "commits/s",
        baseline="pgbench: the same five statements per transaction",
        baseline_value=baseline.tps,
        higher_is_better=True, at_least=0.5, goal="at least half of pgbench's commits/s",
        notes=f"{TABLES} tables, {duration:.0f} s per run after {warmup:.0f} s warm-up; "
              + "; ".join(describe(r) for r in runs)
              + (f"; {errors} failed requests" if errors else ""))]


if __name__ == "__main__":
    from benchmarks._report import text_table

    print(text_table(run(quick=True)))
