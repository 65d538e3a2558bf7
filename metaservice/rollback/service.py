"""Rollback plans (docs/contract.md#rollback-plans): make, apply, complete.

Applying a plan, in one transaction under the topology lock (lock order topology → jobs →
tables, as everywhere; the jobs and tables are locked before the facts are read, so a commit
racing the apply is either seen or refused): every barrier above B of every affected table is
marked rolled back, so no version, lease or next-barrier answer uses it again; ``latest(X)``
goes back to the greatest barrier left (strong cuts move backwards only here); every affected
running job's next answer is ``abort`` and it restarts after the barrier its sinks keep; the
affected tables are *fenced* — commits and root reports to them are refused and their jobs
wait — until the plan is completed, so nothing is written on top of Iceberg tables that are not
rolled back yet.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from metaservice import errors
from metaservice.context import ServiceContext
from metaservice.core import rollback_planning as planning
from metaservice.core.graph import Topology
from metaservice.core.rollback_planning import JobFacts, Snap, TableFacts
from metaservice.db import locks
from metaservice.db.models import RollbackPlanRow, TableRow
from metaservice.names import TableName
from metaservice.repositories import history as history_repo
from metaservice.repositories import rollback as rollback_repo
from metaservice.repositories import tables as tables_repo
from metaservice.repositories.topology import load_running_topology
from metaservice.rollback.schemas import PlanJobOut, PlanTableOut, RollbackPlanOut, SnapOut
from metaservice.versions.catching_up import refresh_after_topology_change, tables_to_refresh

logger = logging.getLogger(__name__)


@dataclass
class _Facts:
    tables: list[TableFacts]
    rows: dict[str, TableRow]
    jobs: list[JobFacts]
    mode: str
    reason: str | None


def _snap(row: Any) -> Snap | None:
    return None if row is None else Snap(row.barrier, row.snapshot_id)


def _gather(session: Session, topology: Topology, table: str, barrier: int) -> _Facts:
    affected = planning.affected_by(topology, table)
    rows = {str(n): r for n, r in tables_repo.find_tables(
        session, [TableName.parse(n) for n in affected.tables]).items()}
    targets = {n: _snap(history_repo.snap(session, r.id, barrier)) for n, r in rows.items()}
    expirations = rollback_repo.expirations_of(
        session, [(rows[n].id, t.snapshot_id) for n, t in targets.items() if t is not None])
    facts = []
    for name in sorted(rows):
        row, target = rows[name], targets[name]
        invalid, count = rollback_repo.invalid_barriers(session, row.id, barrier)
        expiration = (expirations.get((row.id, target.snapshot_id)) if target is not None
                      else None)
        current = (Snap(row.latest_barrier, row.latest_snapshot_id)  # type: ignore[arg-type]
                   if row.latest_barrier is not None else None)
        relation, distance = affected.tables[name]
        facts.append(TableFacts(name, relation, distance, current, target,
                                expiration.state if expiration is not None else None,
                                tuple(invalid), count))
    job_rows = rollback_repo.running_jobs(session, affected.jobs)
    jobs = [JobFacts(j.name, topology.jobs[j.name].sinks, j.last_committed_barrier,
                     j.pinned_barrier) for j in job_rows if j.name in topology.jobs]
    mode, reason = planning.choose_mode(facts)
    return _Facts(facts, rows, jobs, mode, reason)


def _document(facts: _Facts, barrier: int) -> dict[str, Any]:
    targets = {t.name: t.target for t in facts.tables}

    def snap_out(s: Snap | None) -> SnapOut | None:
        return None if s is None else SnapOut(barrier=s.barrier, snapshot_id=s.snapshot_id)

    tables = [PlanTableOut(table=t.name, relation=t.relation,  # type: ignore[arg-type]
                           distance=t.distance, current=snap_out(t.current),
                           target=snap_out(t.target),
                           target_available=t.unavailable_reason is None,
                           unavailable_reason=t.unavailable_reason,
                           invalid_barriers=list(t.invalid), invalid_barrier_count=t.invalid_count)
              for t in facts.tables]
    jobs = [PlanJobOut(job=j.name, last_committed_barrier=j.last_committed,
                       pinned_barrier=j.pinned, restarts=planning.must_restart(j, barrier),
                       restart_after=planning.restart_after(j, targets),
                       aborted_barrier=planning.aborted_barrier(j, barrier))
            for j in facts.jobs]
    return {"mode": facts.mode, "reason": facts.reason,
            "tables": [t.model_dump() for t in tables], "jobs": [j.model_dump() for j in jobs]}


def _out(plan: RollbackPlanRow, table: str) -> RollbackPlanOut:
    return RollbackPlanOut(id=plan.id, table=table, barrier=plan.barrier,
                           state=plan.state, created_at=plan.created_at,  # type: ignore[arg-type]
                           applied_at=plan.applied_at, completed_at=plan.completed_at,
                           **plan.document)


def _table_of(session: Session, plan: RollbackPlanRow) -> str:
    row = tables_repo.tables_by_id(session, [plan.table_id])[plan.table_id]
    return row.qualified_name


def create(session: Session, ctx: ServiceContext, name: TableName, barrier: int) -> RollbackPlanOut:
    """Plan the rollback of ``name`` at ``barrier``; nothing changes until it is applied."""
    row = tables_repo.find_table(session, name)
    if row is None:
        raise errors.UnknownTableError.among([str(name)], tables_repo.qualified_names(session))
    facts = _gather(session, load_running_topology(session), str(name), barrier)
    plan = RollbackPlanRow(id=str(uuid.uuid4()), table_id=row.id, barrier=barrier,
                           state="planned", mode=facts.mode, created_at=ctx.clock.now_ms(),
                           document=_document(facts, barrier))
    session.add(plan)
    session.flush()
    logger.info("rollback_planned", extra={"plan": plan.id, "table": str(name),
                                           "barrier": barrier, "mode": facts.mode,
                                           "tables": len(facts.tables), "jobs": len(facts.jobs)})
    return _out(plan, str(name))


def get(session: Session, plan_id: str) -> RollbackPlanOut:
    plan = rollback_repo.get_plan(session, plan_id)
    if plan is None:
        raise errors.UnknownRollbackPlanError(f"unknown rollback plan {plan_id!r}", plan=plan_id)
    return _out(plan, _table_of(session, plan))


def list_recent(session: Session, limit: int) -> list[RollbackPlanOut]:
    plans = rollback_repo.list_plans(session, limit=limit)
    names = {i: r.qualified_name
             for i, r in tables_repo.tables_by_id(session, {p.table_id for p in plans}).items()}
    return [_out(p, names[p.table_id]) for p in plans]


def _signature(document: dict[str, Any]) -> tuple[Any, ...]:
    """What must not have changed between planning and applying: the tables and their targets,
    the mode. (New barriers above B may have arrived meanwhile: they are invalid too.)"""
    return (document["mode"],
            tuple((t["table"], None if t["target"] is None else t["target"]["snapshot_id"])
                  for t in document["tables"]))


def _lock_affected(session: Session, topology: Topology, table: str) -> None:
    """Lock what an apply decides from before reading it, in the lock order: the affected
    running jobs (by name), then the affected tables with every table whose catching-up flag
    the apply recomputes (the affected tables' whole pipelines), all at once by id. A commit
    racing the apply then either finished before (the facts show it: its barrier is rolled back
    and the job restarts below it) or waits for the apply and meets the fence; never a job
    whose last committed barrier stays at one the rollback took back from its sink."""
    affected = planning.affected_by(topology, table)  # stable: the topology lock is held
    rollback_repo.running_jobs(session, affected.jobs, for_update=True)
    names = set(affected.tables) | tables_to_refresh(topology, topology, affected.tables)
    tables_repo.find_tables(session, [TableName.parse(n) for n in names], for_update=True)


def apply(session: Session, ctx: ServiceContext, plan_id: str) -> RollbackPlanOut:
    """Invalidate, reset ``latest``, abort and restart the jobs, fence the tables. Applying an
    applied (or completed) plan again answers it as it is."""
    locks.change_topology(session)
    plan = rollback_repo.get_plan(session, plan_id, for_update=True)
    if plan is None:
        raise errors.UnknownRollbackPlanError(f"unknown rollback plan {plan_id!r}", plan=plan_id)
    table = _table_of(session, plan)
    if plan.state != "planned":
        return _out(plan, table)
    barrier = plan.barrier
    topology = load_running_topology(session)
    _lock_affected(session, topology, table)
    facts = _gather(session, topology, table, barrier)
    document = _document(facts, barrier)
    if _signature(document) != _signature(plan.document):
        raise errors.RollbackPlanOutdatedError(
            "the topology or the target snapshots changed since the plan was made; make a new "
            "plan", plan=plan_id, planned_mode=plan.document["mode"], mode=document["mode"],
            planned_tables=[t["table"] for t in plan.document["tables"]],
            tables=[t["table"] for t in document["tables"]])
    ids = {n: r.id for n, r in facts.rows.items()}
    fenced = rollback_repo.fences_on(session, ids.values())
    if fenced:
        names = sorted(n for n, i in ids.items() if i in fenced)
        raise errors.RollbackInProgressError(
            f"{', '.join(names)} is being rolled back by another plan; complete it first",
            tables=names, plans=sorted(set(fenced.values())))
    now = ctx.clock.now_ms()
    reason = f"rolled back: {table} revised at barrier {barrier} (plan {plan.id})"
    jobs = {j.name: j for j in rollback_repo.running_jobs(
        session, [j.name for j in facts.jobs], for_update=True)}
    locked = tables_repo.find_tables(session, [TableName.parse(n) for n in ids], for_update=True)
    rolled_back = 0
    for row in sorted(locked.values(), key=lambda r: r.id):
        rolled_back += rollback_repo.roll_back_barriers(session, row.id, barrier)
        rollback_repo.reset_latest(session, row, history_repo.snap(session, row.id, barrier))
    rollback_repo.add_fences(session, plan.id, ids.values())
    targets = {t.name: t.target for t in facts.tables}
    for facts_of_job in facts.jobs:
        job = jobs[facts_of_job.name]
        aborted = planning.aborted_barrier(facts_of_job, barrier)
        if planning.must_restart(facts_of_job, barrier):
            job.last_committed_barrier = planning.restart_after(facts_of_job, targets)
            rollback_repo.invalidate_progress(session, job.name, job.run, barrier)
        if aborted is not None:
            job.pinned_barrier, job.pin_invalidated_reason = aborted, reason[:500]
        job.updated_at = now
    session.flush()
    refresh_after_topology_change(session, topology, topology, ids)
    plan.state, plan.applied_at, plan.document = "applied", now, document
    session.flush()
    logger.info("rollback_applied", extra={"plan": plan.id, "table": table, "barrier": barrier,
                                           "mode": plan.mode, "tables": len(ids),
                                           "jobs": len(facts.jobs),
                                           "barriers_rolled_back": rolled_back})
    return _out(plan, table)


def complete(session: Session, ctx: ServiceContext, plan_id: str) -> RollbackPlanOut:
    """The Iceberg tables were rolled back: lift the fence. Idempotent."""
    plan = rollback_repo.get_plan(session, plan_id, for_update=True)
    if plan is None:
        raise errors.UnknownRollbackPlanError(f"unknown rollback plan {plan_id!r}", plan=plan_id)
    if plan.state == "planned":
        raise errors.RollbackPlanNotAppliedError(
            f"rollback plan {plan_id} is not applied yet", plan=plan_id)
    if plan.state == "applied":
        rollback_repo.lift_fences(session, plan.id)
        plan.state, plan.completed_at = "completed", ctx.clock.now_ms()
        session.flush()
        logger.info("rollback_completed", extra={"plan": plan.id})
    return _out(plan, _table_of(session, plan))

