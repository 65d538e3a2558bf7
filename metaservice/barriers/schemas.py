from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from metaservice.core.positions import Position
from metaservice.schemas import Barrier, SnapshotId


class NextIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    after: Barrier | None = Field(default=None, description="the barrier last processed")


class CommitIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    barrier: Barrier | None = Field(
        default=None, description="the pinned barrier; optional only for jobs without sources")
    snapshot_id: SnapshotId


class RootReportIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    snapshot_id: SnapshotId
    barrier: Barrier | None = Field(
        default=None, description="omitted: assigned max(now_ms, latest + 1)")


class AbortIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(default="", max_length=500)


class CompletedOut(BaseModel):
    table: str
    barrier: int
    snapshot_id: int


class AbortOut(BaseModel):
    job: str
    barrier: int
    attempts: int


class BarrierOut(BaseModel):
    barrier: int
    snapshot_id: int
    committed_at: int
    writer_job: str | None
    rolled_back: bool


class TableBarriersOut(BaseModel):
    table: str
    latest_barrier: int | None
    latest_snapshot_id: int | None
    writer_job: str | None
    catching_up: bool
    barriers: list[BarrierOut]


class SinkCommitOut(BaseModel):
    table: str
    snapshot_id: int
    committed_at: int


class ProgressOut(BaseModel):
    barrier: int
    run: int
    state: str
    started_at: int
    sources_ready_at: int | None
    finished_at: int | None
    duration_ms: int | None
    hop_latency_ms: int | None
    attempts: int
    last_abort_reason: str | None
    snapshots: dict[str, int]
    previous: dict[str, int]
    committed: list[SinkCommitOut]


class JobProgressOut(BaseModel):
    job: str
    progress: list[ProgressOut]


class PositionOut(BaseModel):
    action: Literal["process", "wait", "abort", "none"]
    barrier: int | None = None
    snapshots: dict[str, int] | None = None
    previous: dict[str, int] | None = None
    retry_after_ms: int | None = None
    reason: str | None = None
    restart_after: int | None = Field(
        default=None, description="with an abort caused by a rollback: the job's next barrier "
                                  "comes after this one (absent: from its start position)")


def position_answer(position: Position) -> dict[str, Any]:
    """A position in :class:`PositionOut`'s shape, built directly (the hot path of ``next``),
    its absent fields left out, except a ``process`` position's ``previous``: ``null`` there
    means a full step (docs/contract.md#start)."""
    answer: dict[str, Any] = {"action": position.action}
    if position.barrier is not None:
        answer["barrier"] = position.barrier
    if position.action in ("process", "none"):
        if position.snapshots is not None:
            answer["snapshots"] = position.snapshots
        if position.previous is not None or position.action == "process":
            answer["previous"] = position.previous
    for key, value in (("retry_after_ms", position.retry_after_ms),
                       ("reason", position.reason), ("restart_after", position.restart_after)):
        if value is not None:
            answer[key] = value
    return answer
