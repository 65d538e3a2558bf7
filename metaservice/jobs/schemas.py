from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from metaservice.barriers.service import Position
from metaservice.jobs.service import JobView
from metaservice.schemas import Barrier


class JobOut(BaseModel):
    job: str
    state: Literal["planned", "running", "terminated"]
    run: int = Field(description="incremented at every start")
    sources: list[str]
    sinks: list[str]
    registered_at: int
    started_at: int | None
    terminated_at: int | None
    updated_at: int
    last_committed_barrier: int | None
    pinned_barrier: int | None

    @classmethod
    def of(cls, view: JobView) -> JobOut:
        j = view.job
        return cls(job=j.name, state=j.state, run=j.run,  # type: ignore[arg-type]
                   sources=[str(t) for t in view.sources], sinks=[str(t) for t in view.sinks],
                   registered_at=j.registered_at, started_at=j.started_at,
                   terminated_at=j.terminated_at, updated_at=j.updated_at,
                   last_committed_barrier=j.last_committed_barrier,
                   pinned_barrier=j.pinned_barrier)


class JobList(BaseModel):
    jobs: list[JobOut]


class StartIn(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    start_from: Literal["resume", "latest", "earliest"] | Barrier = Field(
        default="resume", alias="from",
        description="resume (after the last barrier the job's sinks completed; with no such "
                    "history, as latest), latest, earliest, or an explicit barrier")


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
    """A position in :class:`PositionOut`'s shape, its absent fields left out, except a
    ``process`` position's ``previous``: ``null`` there means a full step (SPEC §5.2)."""
    out = PositionOut(action=position.action, barrier=position.barrier,
                      retry_after_ms=position.retry_after_ms, reason=position.reason,
                      restart_after=position.restart_after)
    if position.action in ("process", "none"):
        out.snapshots, out.previous = position.snapshots, position.previous
    answer = out.model_dump(exclude_none=True)
    if position.action == "process":
        answer["previous"] = position.previous
    return answer


class StartOut(BaseModel):
    job: str
    run: int
    state: str
    action: Literal["process", "wait", "abort", "none"]
    barrier: int | None = None
    snapshots: dict[str, int] | None = None
    previous: dict[str, int] | None = None
    retry_after_ms: int | None = None
    reason: str | None = None
    restart_after: int | None = None
