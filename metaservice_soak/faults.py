"""The soak's faults: what happens when, chosen from a seed, and the log of what happened.

A schedule is a list of :class:`Fault` over the run's active window (after a warm-up in which
the pipeline starts, before a quiet end in which it settles): every kind at least once, more at
random, each at a random moment of its own slice of the window so that faults are spread out
and the same seed gives the same schedule.

Kinds:

- ``driver_kill``: SIGKILL of a Spark job's driver (its process group: the Python driver and
  its JVM); the harness restarts it as a user's scheduler would.
- ``server_kill``: SIGKILL of a MetaService server process (one of the replicas behind haproxy
  on PostgreSQL, the single server on SQLite), restarted after ``down_seconds``.
- ``database_crash``: ``pg_ctl stop -m immediate`` of the private PostgreSQL, started again
  after ``down_seconds`` (PostgreSQL only).
- ``stalled_join``: a new job joins the pipeline and never commits for ``hold_seconds``, then
  is stopped (SIGTERM: it unregisters).
- ``store_kill``: SIGKILL of the object store (SeaweedFS, with ``--storage s3``), started again
  on its ports and data after ``down_seconds``.

:class:`FaultLog` appends one JSON line per fault to ``faults.jsonl`` when it ends (``t``, its
start, and ``t_end``, unix seconds), flushed at once.
"""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

DRIVER_KILL = "driver_kill"
SERVER_KILL = "server_kill"
DATABASE_CRASH = "database_crash"
STALLED_JOIN = "stalled_join"
LEADER_FAILOVER = "leader_failover"
STORE_KILL = "store_kill"
KINDS = (DRIVER_KILL, SERVER_KILL, DATABASE_CRASH, STALLED_JOIN)
# the kinds a run on an object store (--storage s3) adds
STORAGE_KINDS = (STORE_KILL,)
# on a Patroni cluster (--patroni) the database's fault is a failover, not a crash in place
PATRONI_KINDS = (DRIVER_KILL, SERVER_KILL, LEADER_FAILOVER, STALLED_JOIN)
# how a leader_failover forces it (metaservice_soak/patroni.py), the target: its leader's
# member killed, frozen (its key in etcd expires), or a switchover
FAILOVER_WAYS = ("kill_leader", "isolate_leader", "switchover")

# the Spark jobs whose drivers are killed (roles of metaservice_soak.roles)
SPARK_JOB_ROLES = ("sibling_batch", "sibling_stream", "join")


@dataclass(frozen=True)
class Fault:
    """One fault of the schedule: ``at`` seconds after the run started."""

    at: float
    kind: str
    target: str = ""
    down_seconds: float = 0.0  # server_kill, database_crash: until the restart
    hold_seconds: float = 0.0  # stalled_join: until the job is stopped


@dataclass(frozen=True)
class ScheduleShape:
    """How a run of ``seconds`` is spread: no fault in the first ``warmup`` seconds nor in the
    last ``quiet`` ones; about one fault every ``mean_gap`` seconds in between."""

    seconds: float
    warmup: float
    quiet: float
    mean_gap: float
    down_seconds: tuple[float, float]
    hold_seconds: tuple[float, float]

    @classmethod
    def for_run(cls, seconds: float) -> ScheduleShape:
        """A 30-minute run: warm-up 2 min, quiet 2 min, a fault every ~70 s, databases down
        3–10 s, stalled joins held 30–90 s. Short runs scale down, keeping every kind. (The
        run's clock starts once the pipeline is live: Spark's start is not in the warm-up.)"""
        if seconds >= 900:
            return cls(seconds, warmup=120, quiet=120, mean_gap=70, down_seconds=(3, 10),
                       hold_seconds=(30, 90))
        return cls(seconds, warmup=max(15.0, seconds * 0.1), quiet=max(15.0, seconds * 0.1),
                   mean_gap=max(15.0, seconds / 12), down_seconds=(2, 5),
                   hold_seconds=(15, max(15.0, min(45.0, seconds * 0.12))))


def schedule(seed: int, shape: ScheduleShape, *, kinds: Sequence[str] = KINDS,
             replicas: int = 2, job_roles: Sequence[str] = SPARK_JOB_ROLES) -> list[Fault]:
    """The faults of a run, in time order (see the module docstring)."""
    rng = random.Random(seed)
    start, end = shape.warmup, shape.seconds - shape.quiet
    if end <= start:
        raise ValueError(f"a run of {shape.seconds:.0f} s leaves no time for faults")
    count = max(len(kinds), round((end - start) / shape.mean_gap))
    chosen = list(kinds) + [rng.choice(list(kinds)) for _ in range(count - len(kinds))]
    rng.shuffle(chosen)
    slice_length = (end - start) / count
    faults = []
    for i, kind in enumerate(chosen):
        at = start + slice_length * (i + rng.uniform(0.2, 0.8))
        faults.append(_fault(rng, kind, at, shape, replicas, job_roles, end))
    return _one_stalled_join_at_a_time(faults)


def _one_stalled_join_at_a_time(faults: list[Fault]) -> list[Fault]:
    """A stalled join ends 5 s before the next one joins: there is one such job (one job id),
    and a second one started beside it would be the same job."""
    joins = [i for i, f in enumerate(faults) if f.kind == STALLED_JOIN]
    for this, following in zip(joins, joins[1:], strict=False):
        fault, limit = faults[this], faults[following].at - 5.0 - faults[this].at
        if fault.hold_seconds > limit:
            faults[this] = replace(fault, hold_seconds=max(1.0, math.floor(limit * 10) / 10))
    return faults


def _fault(rng: random.Random, kind: str, at: float, shape: ScheduleShape, replicas: int,
           job_roles: Sequence[str], end: float) -> Fault:
    if kind == DRIVER_KILL:
        return Fault(round(at, 1), kind, rng.choice(list(job_roles)))
    if kind == SERVER_KILL:
        return Fault(round(at, 1), kind, f"server-{rng.randrange(replicas) + 1}",
                     down_seconds=round(rng.uniform(*shape.down_seconds), 1))
    if kind == DATABASE_CRASH:
        return Fault(round(at, 1), kind, "postgresql",
                     down_seconds=round(rng.uniform(*shape.down_seconds), 1))
    if kind == STORE_KILL:
        return Fault(round(at, 1), kind, "seaweedfs",
                     down_seconds=round(rng.uniform(*shape.down_seconds), 1))
    if kind == LEADER_FAILOVER:
        # the old leader is away for down_seconds after the new one was elected, then rejoins
        return Fault(round(at, 1), kind, rng.choice(FAILOVER_WAYS),
                     down_seconds=round(rng.uniform(*shape.down_seconds), 1))
    if kind == STALLED_JOIN:
        hold = rng.uniform(*shape.hold_seconds)
        return Fault(round(at, 1), kind, "stalled_join",
                     hold_seconds=round(max(5.0, min(hold, end + shape.quiet / 2 - at)), 1))
    raise ValueError(f"unknown fault kind {kind!r}")


@dataclass
class FaultRecord:
    """A fault as it happened (unix seconds)."""

    kind: str
    target: str
    t: float
    t_end: float
    planned_at: float
    detail: dict[str, Any] = field(default_factory=dict)


class FaultLog:
    """``faults.jsonl``: one line per fault, written when it ends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, record: FaultRecord) -> None:
        line = json.dumps(asdict(record), sort_keys=True)
        with self._lock, self.path.open("a") as out:
            out.write(line + "\n")
            out.flush()

    def read(self) -> list[FaultRecord]:
        if not self.path.exists():
            return []
        return [FaultRecord(**json.loads(line))
                for line in self.path.read_text().splitlines() if line.strip()]
