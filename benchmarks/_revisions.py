"""Root reports of two checkouts of the server, interleaved: the server CPU time per report of
an older revision against this one, on the same machine and PostgreSQL, in one run.

    git worktree add /tmp/before <revision>
    python -m benchmarks._revisions /tmp/before --rounds 6

Each round starts one ``metaservice serve`` of each checkout (``PYTHONPATH`` names it; the
order alternates from round to round) on a fresh schema of 1,000 root tables
(``benchmarks/commits.py``), sends root reports from 4 keep-alive connections for 8 s after a
second of warm-up, and reads the server's CPU time from ``/proc``. The medians of the rounds
are compared: a busy machine colours single rounds, not the comparison of interleaved ones.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
from pathlib import Path

from benchmarks import _environment as environment
from benchmarks._loadgen import run_load
from benchmarks.commits import TABLES, create_tables

THIS = Path(__file__).resolve().parent.parent


def report_cpu_ms(tree: Path, seed: int) -> float:
    """Server CPU time (ms) per root report of the server in ``tree``."""
    rng = random.Random(seed)

    def make(client: int, n: int) -> tuple[str, str, bytes]:
        body = json.dumps({"snapshot_id": rng.getrandbits(62)}).encode()
        return "POST", f"/tables/lake/ingest/t{n % TABLES}/barriers", body

    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(tree)
    try:
        with environment.postgres_schema("revisions") as url:
            create_tables(url)
            with environment.server_processes(url, count=1) as (server,):
                before = server.cpu_seconds()
                result = run_load([server.url], clients=4, make=make, warmup=1.0, duration=8.0)
                if result.failed:
                    raise RuntimeError(f"{result.failed} reports failed: {result.first_error}")
                return (server.cpu_seconds() - before) * 1000 / max(result.answered, 1)
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="a checkout of the older revision")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    trees = {"old": args.old.resolve(), "new": THIS}
    figures: dict[str, list[float]] = {"old": [], "new": []}
    for round_ in range(args.rounds):
        for side in ("old", "new") if round_ % 2 == 0 else ("new", "old"):
            figures[side].append(report_cpu_ms(trees[side], round_))
            print(f"round {round_ + 1} {side}: {figures[side][-1]:.2f} ms per report", flush=True)
    old, new = (statistics.median(figures[s]) for s in ("old", "new"))
    print(f"median server CPU per root report: old {old:.2f} ms, new {new:.2f} ms, "
          f"new ÷ old {new / old:.2f}")


if __name__ == "__main__":
    main()
