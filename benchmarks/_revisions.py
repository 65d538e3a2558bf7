"""Two checkouts of the server, interleaved: the server CPU time per request of an older
revision against this one, on the same machine, in one run.

    git worktree add /tmp/before <revision>
    python -m benchmarks._revisions /tmp/before --rounds 6
    python -m benchmarks._revisions /tmp/before --path next --backend sqlite

Each round starts the ``metaservice serve`` processes of each checkout (``PYTHONPATH`` names it; the
order alternates from round to round) on a fresh database and reads the server's CPU time from
``/proc``. ``--path report``: a schema of 1,000 root tables (``benchmarks/commits.py``), two
server processes, root reports from 16 keep-alive clients, each to its own share of the tables,
for 8 s after a second of warm-up. ``--path next``: one job on one root, as
``benchmarks/next_siblings.py``'s single pipeline, round after round (a root report, the job's
``next`` checked to hand out the new barrier, its commit) for 8 s after a few warm-up rounds;
the CPU and latency of each ``next`` alone. ``--path load``: ``loadTable`` of a table of 1,000
snapshots (``benchmarks/catalog.py``'s), one keep-alive connection for 6 s. ``--path commit``:
barrier commits through the built-in catalog (pyiceberg appends). ``--path versions``: strong
``POST /versions`` of one pipeline's 10 tables (``benchmarks/versions.py``'s chains, 10⁵ barrier
rows). The medians of the
rounds are compared: a busy machine colours single rounds, not the comparison of interleaved
ones.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks import _environment as environment
from benchmarks._report import percentile
from benchmarks.commits import create_tables, measure_metaservice
from benchmarks.next_siblings import WARMUP_ROUNDS, Client, Pipeline, one_round, set_up

THIS = Path(__file__).resolve().parent.parent


@contextmanager
def _checkout(tree: Path) -> Iterator[None]:
    """Servers started inside import the server from ``tree``: ``PYTHONPATH`` names it, and
    ``PYTHONSAFEPATH`` keeps ``python -m`` from putting the working directory (this checkout,
    when run from its root) before it."""
    previous = {k: os.environ.get(k) for k in ("PYTHONPATH", "PYTHONSAFEPATH")}
    os.environ.update(PYTHONPATH=str(tree), PYTHONSAFEPATH="1")
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass(frozen=True)
class Figures:
    cpu_ms: float  # server CPU per request
    p50_ms: float | None = None
    p99_ms: float | None = None
    per_second: float | None = None


def report_figures(tree: Path, seed: int, backend: str) -> Figures:
    """Root reports to two server processes of the checkout in ``tree`` on a fresh database of
    1,000 root tables, with the commits benchmark's load (16 keep-alive clients, each reporting
    new snapshots to its own share of the tables): server CPU per report, p50, p99, reports/s."""
    database = (environment.postgres_schema("revisions") if backend == "postgresql"
                else environment.sqlite_file("revisions"))
    with _checkout(tree), database as url:
        create_tables(url)
        run = measure_metaservice(url, processes=2, clients=16, warmup=1.0, duration=8.0)
    if run.errors:
        raise RuntimeError(f"{run.errors} reports failed: {run.first_error}")
    return Figures(run.server_cpu_ms, run.p50_ms, run.p99_ms, run.tps)


def next_figures(tree: Path, seed: int, backend: str) -> Figures:
    """Server CPU time (ms) per ``next`` of one job on one root, and its p50 and p99."""
    rng = random.Random(seed)
    database = (environment.postgres_schema("revisions") if backend == "postgresql"
                else environment.sqlite_file("revisions"))
    with _checkout(tree), database as url, environment.server_processes(url, count=1) as (
            server,):
        client = Client(server.url)
        pipeline = Pipeline("single", 1)
        try:
            set_up(client, pipeline, rng)
            for _ in range(WARMUP_ROUNDS):
                one_round(client, server, pipeline, rng, record=False)
            until = time.monotonic() + 8.0
            while time.monotonic() < until:
                one_round(client, server, pipeline, rng, record=True)
        finally:
            client.close()
    steps = len(pipeline.next_ms)
    return Figures(pipeline.next_cpu_s * 1000 / steps, percentile(pipeline.next_ms, 50),
                   percentile(pipeline.next_ms, 99))


def load_figures(tree: Path, seed: int, backend: str) -> Figures:
    """``loadTable`` of one table's head with ``LOAD_SNAPSHOTS`` snapshots through the built-in
    catalog (``benchmarks/catalog.py``'s table), one keep-alive connection for 6 s after a
    second of warm-up: server CPU per load, p50, p99."""
    from benchmarks._loadgen import sequential
    from benchmarks.catalog import HISTORY_TABLE, NAMESPACE, build_history, catalog_site

    with _checkout(tree), catalog_site(backend) as (server, rest, _sql):
        build_history(rest, LOAD_SNAPSHOTS)
        path = f"/iceberg/v1/namespaces/{NAMESPACE}/tables/{HISTORY_TABLE}"
        cpu = server.cpu_seconds()
        result = sequential(server.url, path, 6.0)
        cpu_ms = (server.cpu_seconds() - cpu) * 1000 / result.answered
    return Figures(cpu_ms, percentile(result.latencies_ms, 50),
                   percentile(result.latencies_ms, 99))


# loadTable's table in ``--path load``: the catalog benchmark's full size
LOAD_SNAPSHOTS = 1_000


def commit_figures(tree: Path, seed: int, backend: str) -> Figures:
    """Barrier commits through the built-in catalog: pyiceberg ``RestCatalog`` appends of one
    row with ``metaservice.barrier``, as the catalog benchmark times them (fresh tables of
    ``COMMITS_PER_TABLE`` appends), for 8 s after ``COMMITS_PER_TABLE`` warm-up appends: server
    CPU per commit, p50, p99 (timed on the client)."""
    import pyarrow as pa

    from benchmarks.catalog import NAMESPACE, catalog_site

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False),
                        pa.field("payload", pa.string())])
    rows = pa.table({"id": [1], "payload": ["x" * 32]}, schema=schema)
    latencies: list[float] = []
    with _checkout(tree), catalog_site(backend) as (server, rest, _sql):
        barrier = int(time.time() * 1000)
        commits = cpu = 0.0
        until = None
        for n in itertools.count():
            if n % COMMITS_PER_TABLE == 0:
                table = rest.create_table((NAMESPACE, f"t{n}"), schema=schema)
            if n == COMMITS_PER_TABLE:  # warmed up
                cpu, until = server.cpu_seconds(), time.monotonic() + 8.0
            if until is not None and time.monotonic() >= until:
                break
            barrier += 1
            started = time.perf_counter()
            table.append(rows, snapshot_properties={"metaservice.barrier": str(barrier)})
            if until is not None:
                latencies.append((time.perf_counter() - started) * 1000)
                commits += 1
        cpu_ms = (server.cpu_seconds() - cpu) * 1000 / commits
    return Figures(cpu_ms, percentile(latencies, 50), percentile(latencies, 99))


COMMITS_PER_TABLE = 25


def versions_figures(tree: Path, seed: int, backend: str) -> Figures:
    """Strong ``POST /versions`` of one pipeline's 10 tables (``benchmarks/versions.py``'s
    chains, ``VERSIONS_BARRIERS`` barriers per table), one keep-alive connection for 6 s after a
    second of warm-up, every answer checked against the loader's cut: server CPU per request,
    p50, p99."""
    from benchmarks.versions import measure_metaservice as measure_versions

    with _checkout(tree):
        latencies = measure_versions(backend, VERSIONS_BARRIERS, 6.0)
    return Figures(latencies.server_cpu_ms, percentile(latencies.one_pipeline_ms, 50),
                   percentile(latencies.one_pipeline_ms, 99))


# ``--path versions``: the versions benchmark's quick data set (10⁵ barrier rows)
VERSIONS_BARRIERS = 100

PATHS = {"report": report_figures, "next": next_figures, "load": load_figures,
         "commit": commit_figures, "versions": versions_figures}


def _measured(measure: Callable[[Path, int, str], Figures], tree: Path, seed: int,
              backend: str, attempts: int = 3) -> Figures:
    """One round's figures; a server that did not become ready in time (a machine loaded by
    other work) is started again."""
    for attempt in range(attempts):
        try:
            return measure(tree, seed, backend)
        except RuntimeError as failed:
            if "did not become ready" not in str(failed) or attempt == attempts - 1:
                raise
            print(f"  ({failed}; starting again)", flush=True)
    raise AssertionError("unreachable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="a checkout of the older revision")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--path", choices=sorted(PATHS), default="report")
    parser.add_argument("--backend", choices=["postgresql", "sqlite"], default="postgresql")
    args = parser.parse_args()
    trees = {"old": args.old.resolve(), "new": THIS}
    measure = PATHS[args.path]
    figures: dict[str, list[Figures]] = {"old": [], "new": []}
    for round_ in range(args.rounds):
        for side in ("old", "new") if round_ % 2 == 0 else ("new", "old"):
            f = _measured(measure, trees[side], round_, args.backend)
            figures[side].append(f)
            latency = "" if f.p50_ms is None else f", p50 {f.p50_ms:.2f} ms, p99 {f.p99_ms:.2f} ms"
            print(f"round {round_ + 1} {side}: {f.cpu_ms:.2f} ms server CPU per {args.path}"
                  f"{latency}", flush=True)
    for figure in ("cpu_ms", "p50_ms", "p99_ms", "per_second"):
        values = {s: [getattr(f, figure) for f in figures[s]] for s in figures}
        if None in values["old"]:
            continue
        old, new = (statistics.median(values[s]) for s in ("old", "new"))
        # one direction for every ratio: > 1 = new better (more per second, less time or CPU)
        better = (f"new ÷ old {new / old:.2f}" if figure == "per_second"
                  else f"old ÷ new {old / new:.2f}")
        print(f"{args.path} ({args.backend}), median {figure}: old {old:.2f}, new {new:.2f}, "
              f"{better} (> 1 = new better); runs old "
              f"{', '.join(f'{v:.2f}' for v in values['old'])}; new "
              f"{', '.join(f'{v:.2f}' for v in values['new'])}")


if __name__ == "__main__":
    main()
