from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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
