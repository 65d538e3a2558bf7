"""Offsets of the ``metaservice`` streaming source, and Spark's offset log that records them.

An offset is the position of one source of one job after a barrier::

    {"job": "enrich", "barrier": 1700000000000, "snapshots": {"lake.db.orders": 4711, ...}}

``snapshots`` are the service's ``snap(s, B)`` for every source of the job: the service pins one
barrier per job, so the sources of a query (and a replay after a crash) read the same aligned
barrier. The offset before the first barrier has ``"barrier": null`` and no snapshots.
``"registration": n`` marks the empty micro-batch that lets Spark plan the query (and so register
its sink) before the job starts: the barrier stays the same, so nothing is read or committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BarrierOffset:
    job: str
    barrier: int | None = None
    snapshots: dict[str, int] = field(default_factory=dict)
    registration: int = 0

    @classmethod
    def initial(cls, job: str) -> BarrierOffset:
        return cls(job)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BarrierOffset:
        barrier = data.get("barrier")
        return cls(str(data["job"]), None if barrier is None else int(barrier),
                   {str(k): int(v) for k, v in (data.get("snapshots") or {}).items()},
                   int(data.get("registration") or 0))

    @staticmethod
    def is_offset(data: Any) -> bool:
        return isinstance(data, dict) and {"job", "barrier", "snapshots"} <= data.keys()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"job": self.job, "barrier": self.barrier,
                               "snapshots": dict(sorted(self.snapshots.items()))}
        if self.registration:
            out["registration"] = self.registration
        return out

    def next_registration(self) -> BarrierOffset:
        return BarrierOffset(self.job, self.barrier, dict(self.snapshots), self.registration + 1)
