from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from metaservice.names import QualifiedTable
from metaservice.schemas import Barrier


class RollbackPlanIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    table: QualifiedTable = Field(description="the table to revise")
    barrier: Barrier = Field(description="roll back to snap(X, barrier); barriers above it "
                                         "become invalid")


class SnapOut(BaseModel):
    barrier: int
    snapshot_id: int


class PlanTableOut(BaseModel):
    table: str
    relation: Literal["revised", "rewritten", "downstream"] = Field(
        description="revised: the table asked for; rewritten: another sink of its writer, which "
                    "restarts; downstream: reached from those through running jobs")
    distance: int = Field(description="jobs crossed from the revised (or rewritten) table")
    current: SnapOut | None = Field(description="latest(X) when the plan was made or applied")
    target: SnapOut | None = Field(description="snap(X, B): the snapshot to roll back to")
    target_available: bool
    unavailable_reason: str | None
    invalid_barriers: list[int] = Field(description="barriers above B, oldest first (at most "
                                                    "1000 listed)")
    invalid_barrier_count: int


class PlanJobOut(BaseModel):
    job: str
    last_committed_barrier: int | None
    pinned_barrier: int | None
    restarts: bool = Field(description="it committed barriers above B: it restarts from B")
    restart_after: int | None = Field(
        description="its next barrier comes after this one (None: from its start position)")
    aborted_barrier: int | None = Field(
        description="the barrier its next answer aborts (held, or committed above B)")


class RollbackPlanOut(BaseModel):
    id: str
    table: str
    barrier: int
    state: Literal["planned", "applied", "completed"] = Field(
        description="applied: barriers invalidated and the tables fenced (no commit, jobs wait) "
                    "until POST /rollback-plans/{id}/complete once Iceberg was rolled back")
    mode: Literal["incremental", "full"]
    reason: str | None = Field(description="why the rollback is full")
    created_at: int
    applied_at: int | None
    completed_at: int | None
    tables: list[PlanTableOut]
    jobs: list[PlanJobOut]


class RollbackPlanList(BaseModel):
    plans: list[RollbackPlanOut]
