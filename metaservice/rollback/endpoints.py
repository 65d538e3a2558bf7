"""HTTP only: rollback plans."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from metaservice.deps import Context, ReadSession, WriteSession
from metaservice.names import TableName
from metaservice.rollback import service
from metaservice.rollback.schemas import RollbackPlanIn, RollbackPlanList, RollbackPlanOut
from metaservice.schemas import TextInt

router = APIRouter(tags=["rollback"])

PlanId = Annotated[str, Path(pattern=r"^[0-9a-f-]{36}$", description="the plan's id")]


@router.post("/rollback-plans", response_model=RollbackPlanOut, status_code=201,
             operation_id="create_rollback_plan")
def create_rollback_plan(body: RollbackPlanIn, session: WriteSession,
                         ctx: Context) -> RollbackPlanOut:
    """For the table and everything downstream: the snapshot to roll back to (snap(X, B)), the
    barriers that become invalid, the jobs that restart; incremental, or full with the reason.
    Nothing changes until the plan is applied."""
    return service.create(session, ctx, TableName.parse(body.table), body.barrier)


@router.get("/rollback-plans", response_model=RollbackPlanList, operation_id="list_rollback_plans")
def list_rollback_plans(session: ReadSession,
                        limit: Annotated[TextInt, Query(ge=1, le=100)] = 20) -> RollbackPlanList:
    """The most recent plans, newest first."""
    return RollbackPlanList(plans=service.list_recent(session, limit))


@router.get("/rollback-plans/{plan_id}", response_model=RollbackPlanOut,
            operation_id="get_rollback_plan")
def get_rollback_plan(plan_id: PlanId, session: ReadSession) -> RollbackPlanOut:
    return service.get(session, plan_id)


@router.post("/rollback-plans/{plan_id}/apply", response_model=RollbackPlanOut,
             operation_id="apply_rollback_plan")
def apply_rollback_plan(plan_id: PlanId, session: WriteSession, ctx: Context) -> RollbackPlanOut:
    """Marks the barriers above B rolled back (no version, lease or next answer uses them
    again), resets latest(X), makes the affected jobs abort and restart, and fences the tables
    until the plan is completed. Idempotent."""
    return service.apply(session, ctx, plan_id)


@router.post("/rollback-plans/{plan_id}/complete", response_model=RollbackPlanOut,
             operation_id="complete_rollback_plan")
def complete_rollback_plan(plan_id: PlanId, session: WriteSession,
                           ctx: Context) -> RollbackPlanOut:
    """The Iceberg tables were rolled back to their targets: lift the fence. Idempotent."""
    return service.complete(session, ctx, plan_id)
