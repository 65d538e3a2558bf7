"""Iceberg commit latency over a long run of barrier commits, with and without regular
protected expiration.

Each barrier commit is a pyiceberg ``append`` of a one-row Arrow table to a root table (SQL
catalog on SQLite, local files) followed by its root report to a real MetaService server (its
own process, SQLite, as deployed). pyiceberg's commit cost grows with the snapshots a table
keeps, so the same run is made twice on fresh tables:

- *with expiration*: every ``--every`` commits (default 50) ``spark_plugin.expire_snapshots``
  asks MetaService which snapshots may go (keeping the newest ``--retain-last``, default 10) and
  removes exactly those. Meanwhile a reader leases the table's strong version every 200 commits
  and holds it for 300: expiration must skip it, and the run checks after every expiration that
  every leased snapshot is still in the table;
- *without expiration*: the same commits, nothing expired (the baseline), for the first
  ``--baseline-commits`` commits only (default 1,000): its commits grow with every snapshot
  kept (~0.5 s around the 1,000th, ~2 s around the 2,000th), so the full length would take
  hours and show nothing more.

The two runs are interleaved commit by commit (same load on the machine for both). Both tables
merge manifests and keep a short metadata log (``TABLE_PROPERTIES``): those costs grow with
history too, but no snapshot expiration bounds them.

Goal: with expiration, the commit latency around the 5,000th commit is at most 1.5× the latency
around the 50th. "Around" is the median of the 50 commits ending there (one commit is too noisy
a sample).

``python -m benchmarks.expiration [--commits N] [--baseline-commits M] [--every K]
[--retain-last R]`` prints the figures; ``python -m benchmarks expiration [--quick]`` also
records them in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._environment import server_processes, sqlite_file
from benchmarks._report import Result, better_ratio, percentile, text_table

WINDOW = 50
# Both tables: merged manifests (an append-only table otherwise adds one manifest per commit to
# every later manifest list, whatever is expired) and a metadata log of 10 entries (pyiceberg
# keeps 100 by default, deep-copied several times per commit: at the default the log is still
# filling at the 50th commit, and the ratio would measure that instead of snapshot history).
TABLE_PROPERTIES = {
    "commit.manifest-merge.enabled": "true",
    "write.metadata.previous-versions-max": "10",
    "write.metadata.delete-after-commit.enabled": "true",
}
READER_EVERY, READER_HOLDS = 200, 300


@dataclass
class Run:
    """The measurements of one run."""

    commits_ms: list[float] = field(default_factory=list)  # append + root report
    appends_ms: list[float] = field(default_factory=list)  # the Iceberg commit alone
    expirations_ms: list[float] = field(default_factory=list)
    expired: int = 0
    refused: int = 0
    retained_at_end: int = 0
    leases_taken: int = 0
    leased_snapshots_lost: int = 0

    def around(self, commit: int, series: str = "commits_ms") -> float:
        """Median latency of the ``WINDOW`` commits ending at ``commit`` (1-based)."""
        values: list[float] = getattr(self, series)
        start = max(0, commit - WINDOW)
        return statistics.median(values[start:commit])


class _Runner:
    """One table's run, a commit at a time (the two runs are interleaved, commit by commit, so
    that both see the same load on the machine)."""

    def __init__(self, catalog: Any, client: Any, table_name: str, *, expire_every: int | None,
                 retain_last: int) -> None:
        import pyarrow as pa

        self.pa, self.catalog, self.client, self.name = pa, catalog, client, table_name
        self.expire_every, self.retain_last = expire_every, retain_last
        self.schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
        _, database, table = table_name.split(".")
        self.identifier = (database, table)
        self.table = catalog.create_table(self.identifier, schema=self.schema,
                                          properties=TABLE_PROPERTIES)
        self.run = Run()
        self.held: list[tuple[int, str, int]] = []  # (taken at commit, lease id, snapshot)

    def step(self, i: int) -> None:
        import spark_plugin as sp

        run, client = self.run, self.client
        data = self.pa.table({"id": [i]}, schema=self.schema)
        started = time.perf_counter()
        self.table.append(data)
        appended = time.perf_counter()
        client.report_root_barrier(self.name, self.table.current_snapshot().snapshot_id)
        done = time.perf_counter()
        run.commits_ms.append((done - started) * 1000)
        run.appends_ms.append((appended - started) * 1000)
        if self.expire_every is None:
            return
        if i % READER_EVERY == 0:
            versions = client.get_versions([self.name], lease_seconds=3600, holder="reader")
            self.held.append((i, str(versions.lease_id),
                              versions.versions[self.name].snapshot_id))
            run.leases_taken += 1
        for entry in [h for h in self.held if i - h[0] >= READER_HOLDS]:
            client.release_lease(entry[1])
            self.held.remove(entry)
        if i % self.expire_every == 0:
            started = time.perf_counter()
            summary = sp.expire_snapshots(self.name, retain_last=self.retain_last, client=client,
                                          catalog=self.catalog)
            run.expirations_ms.append((time.perf_counter() - started) * 1000)
            run.expired += len(summary.expired)
            run.refused += len(summary.refused)
            current = self.catalog.load_table(self.identifier).metadata
            run.leased_snapshots_lost += sum(
                1 for _, _, s in self.held if current.snapshot_by_id(s) is None)

    def finish(self) -> Run:
        self.run.retained_at_end = len(self.catalog.load_table(self.identifier).metadata.snapshots)
        for _, lease_id, _ in self.held:
            self.client.release_lease(lease_id)
        return self.run


def measure(commits: int, baseline_commits: int, expire_every: int,
            retain_last: int) -> tuple[Run, Run]:
    """(with expiration, without) on fresh tables of one catalog and one server."""
    from pyiceberg.catalog.sql import SqlCatalog

    import spark_plugin as sp

    scratch = Path(tempfile.mkdtemp(prefix="bench_expiration_"))
    try:
        catalog = SqlCatalog("bench", uri=f"sqlite:///{scratch / 'catalog.db'}",
                             warehouse=f"file://{scratch / 'warehouse'}")
        catalog.create_namespace("db")
        with sqlite_file("expiration") as url, server_processes(url) as servers, \
                sp.MetaServiceClient(servers[0].url) as client:
            expiring = _Runner(catalog, client, "bench.db.expired", expire_every=expire_every,
                               retain_last=retain_last)
            keeping = _Runner(catalog, client, "bench.db.kept", expire_every=None,
                              retain_last=retain_last)
            for i in range(1, commits + 1):
                expiring.step(i)
                if i <= baseline_commits:
                    keeping.step(i)
            return expiring.finish(), keeping.finish()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def results(with_expiration: Run, without: Run, commits: int, expire_every: int,
            retain_last: int) -> list[Result]:
    early = min(WINDOW, commits)
    baseline_commits = len(without.commits_ms)
    late_with, early_with = with_expiration.around(commits), with_expiration.around(early)
    late_without, early_without = without.around(baseline_commits), without.around(early)
    at_baseline_end = with_expiration.around(baseline_commits)
    n, m = f"{commits:,}", f"{baseline_commits:,}"
    expirations = with_expiration.expirations_ms
    return [
        Result.compare(
            f"commit latency around the {n}th commit, with expiration", late_with, "ms",
            baseline="the same run around the 50th commit", baseline_value=early_with,
            higher_is_better=False, at_least=1 / 1.5,
            goal="at most 1.5× the 50th commit's latency",
            notes=f"median of {WINDOW} commits (pyiceberg append of 1 row + root report); "
                  f"expiration every {expire_every} commits keeping the newest {retain_last}; "
                  f"{with_expiration.retained_at_end} snapshots kept at the end; Iceberg append "
                  f"alone {with_expiration.around(early, 'appends_ms'):.1f} → "
                  f"{with_expiration.around(commits, 'appends_ms'):.1f} ms"),
        Result(
            f"commit latency around the {m}th commit, without expiration", late_without, "ms",
            baseline="the same run around the 50th commit", baseline_value=early_without,
            ratio=better_ratio(late_without, early_without, higher_is_better=False),
            notes=f"{without.retained_at_end} snapshots kept at the end; Iceberg append alone "
                  f"{without.around(early, 'appends_ms'):.1f} → "
                  f"{without.around(baseline_commits, 'appends_ms'):.1f} ms"),
        Result.compare(
            f"commit latency around the {m}th commit: with vs without expiration",
            at_baseline_end, "ms", baseline="without expiration", baseline_value=late_without,
            higher_is_better=False, at_least=1, goal="faster than without expiration"),
        Result(
            "one protected expiration run (ask, expire in Iceberg, report), p50",
            percentile(expirations, 50) if expirations else None, "ms",
            notes=f"p95 {percentile(expirations, 95) if expirations else 0:.1f} ms over "
                  f"{len(expirations)} runs; {with_expiration.expired} snapshots expired, "
                  f"{with_expiration.refused} refusals (latest, leases)"),
        Result.absolute(
            "leased snapshots lost to expiration", with_expiration.leased_snapshots_lost, "",
            goal="0", met_if=lambda v: v == 0,
            notes=f"{with_expiration.leases_taken} strong-version leases held "
                  f"{READER_HOLDS} commits each, checked after every expiration"),
    ]


def run(quick: bool, *, commits: int | None = None, baseline_commits: int | None = None,
        expire_every: int = 50, retain_last: int = 10) -> list[Result]:
    commits = commits or (400 if quick else 5000)
    baseline_commits = min(commits, baseline_commits or (400 if quick else 1000))
    with_expiration, without = measure(commits, baseline_commits, expire_every, retain_last)
    return results(with_expiration, without, commits, expire_every, retain_last)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.expiration",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=5000,
                        help="barrier commits of the run with expiration")
    parser.add_argument("--baseline-commits", type=int, default=1000,
                        help="barrier commits of the run without expiration")
    parser.add_argument("--every", type=int, default=50, help="expire every K commits")
    parser.add_argument("--retain-last", type=int, default=10, help="snapshots always kept")
    parser.add_argument("--quick", action="store_true", help="400 commits")
    args = parser.parse_args(argv)
    if min(args.commits, args.baseline_commits) < WINDOW:
        parser.error(f"--commits and --baseline-commits must be at least {WINDOW}")
    commits = 400 if args.quick and args.commits == 5000 else args.commits
    baseline = 400 if args.quick and args.baseline_commits == 1000 else args.baseline_commits
    print(text_table(run(args.quick, commits=commits, baseline_commits=baseline,
                         expire_every=args.every, retain_last=args.retain_last)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
