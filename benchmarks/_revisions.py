"""Root reports of two checkouts of the server, interleaved: the commits/s, latency and server
CPU time per report of an older revision against this one, on the same machine and database,
in one run.

    git worktree add /tmp/before <revision>
    python -m benchmarks._revisions /tmp/before --rounds 6 --backend both

Each round starts the ``metaservice serve`` processes of each checkout (``PYTHONPATH`` names
it; the order alternates from round to round) on a fresh database of 1,000 root tables and
sends them the commits benchmark's load (``benchmarks/commits.py``: each keep-alive client
reports new snapshots to its own share of the tables) after a second of warm-up, reading the
servers' CPU time from ``/proc``. The medians of the rounds are compared: a busy machine
colours single rounds, not the comparison of interleaved ones.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks import _environment as environment
from benchmarks.commits import Run, create_tables, measure_metaservice

THIS = Path(__file__).resolve().parent.parent


@contextmanager
def _database(backend: str) -> Iterator[str]:
    if backend == "postgresql":
        with environment.postgres_schema("revisions") as url:
            yield url
    else:
        with environment.sqlite_file("revisions") as url:
            yield url


def measure(tree: Path, backend: str, processes: int, clients: int, seconds: float) -> Run:
    """Root reports to the servers of the checkout in ``tree``, on a fresh database."""
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(tree)
    try:
        with _database(backend) as url:
            create_tables(url)
            result = measure_metaservice(url, processes, clients, warmup=1.0, duration=seconds)
        if result.errors:
            raise RuntimeError(f"{result.errors} reports failed: {result.first_error}")
        return result
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="a checkout of the older revision")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"],
                        default="postgresql")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    trees = {"old": args.old.resolve(), "new": THIS}
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    for backend in backends:
        runs: dict[str, list[Run]] = {"old": [], "new": []}
        for round_ in range(args.rounds):
            for side in ("old", "new") if round_ % 2 == 0 else ("new", "old"):
                r = measure(trees[side], backend, args.processes, args.clients, args.seconds)
                runs[side].append(r)
                print(f"{backend} round {round_ + 1} {side}: {r.tps:,.0f} reports/s, p50 "
                      f"{r.p50_ms:.1f} ms, p99 {r.p99_ms:.1f} ms, server CPU "
                      f"{r.server_cpu_ms:.2f} ms per report", flush=True)

        print(f"{backend}, {args.processes} processes, {args.clients} clients, medians of "
              f"{args.rounds} rounds (old → new):")
        for figure, label, unit in (("tps", "reports/s", ""), ("p50_ms", "p50", " ms"),
                                    ("p99_ms", "p99", " ms"),
                                    ("server_cpu_ms", "server CPU per report", " ms")):
            old, new = (statistics.median(getattr(r, figure) for r in runs[side])
                        for side in ("old", "new"))
            print(f"  {label}: {old:,.2f}{unit} → {new:,.2f}{unit} (new ÷ old {new / old:.2f})",
                  flush=True)


if __name__ == "__main__":
    main()
