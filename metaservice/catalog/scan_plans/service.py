"""Server-side scan planning (docs/contract.md#scan-planning): the rules.

- A plan is made at a snapshot: the request's ``snapshot-id`` (or the appends from
  ``start-snapshot-id`` to ``end-snapshot-id``), else the table's current one; in a read session
  (``lake@strong``, ``lake@barrier=<B>``) over the table as the session serves it, at the session's
  cut (fixed by this request if it is the table's first use in the session), so that plans of
  several tables name files of one barrier. The caller must be one who may load the table (a
  reader; in a session, the session's owner).
- Planning reads manifests: the pointer (and, in a session, the cut) is read in one transaction,
  the plan made outside any, and the plan recorded in one write transaction that re-checks the
  table is the one planned (docs/contract.md#no-io-under-a-write-lock).
- A plan is a lease (same id) on the snapshots it planned: while it lives they cannot be
  expired. It lives ``METASERVICE_SCAN_PLAN_SECONDS``; ``DELETE …/plan/{plan-id}`` releases it at
  once. A principal holds at most ``METASERVICE_MAX_SCAN_PLANS`` live plans: one more is 429
  ``too_many_scan_plans``, naming the cancel route.
- Planning and cancelling take an ``Idempotency-Key`` (``idempotency.py``): a plan claims it in
  the transaction that records the plan, before the plan is counted, with the answer as its
  outcome; a retry of the same request gets that answer (the same plan, no second lease, nothing
  counted) and a cancel's retry its 204. A planning that failed (it keeps no plan) is the key's
  outcome too.
- A plan of at most ``METASERVICE_SCAN_PLAN_FILES_PER_TASK`` files is answered whole; a bigger
  one as plan tasks of at most that many, fetched with ``POST …/tasks``. ``GET …/plan/{plan-id}``
  answers the plan's plan tasks. A plan that was cancelled, expired, never was, is another
  principal's or another table's is 404 ``NoSuchPlanIdException`` (its plan tasks 404
  ``NoSuchPlanTaskException``), from any server process: plans live in the database.
- Every manifest list and manifest is confined to the warehouse before it is read (400
  ``location_outside_warehouse``); one that cannot be read (files deleted behind the catalog)
  makes the planning ``failed`` (the specification's ``FailedPlanningResult``), keeping no plan;
  an object store that does not answer is 503.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from metaservice.auth.service import Principal
from metaservice.catalog import idempotency
from metaservice.catalog.errors import (
    TOO_MANY_SCAN_PLANS,
    NoSuchPlanIdError,
    NoSuchPlanTaskError,
    NoSuchTableError,
    RefusedError,
)
from metaservice.catalog.read_sessions import consistent_warehouses
from metaservice.catalog.read_sessions import service as read_sessions
from metaservice.catalog.requests import PlanTableScanRequest
from metaservice.catalog.scan_plans import repository as repo
from metaservice.catalog.scan_plans.planning import Plan, Scan, plan_scan
from metaservice.catalog.site import CatalogSite, existing_table_namespace, table_name
from metaservice.catalog.storage.object_store import unavailable_as_503
from metaservice.catalog.tables import repository as tables_catalog_repo
from metaservice.catalog.tables import service as tables
from metaservice.context import ServiceContext
from metaservice.db.models import LeaseRow, ScanPlanRow
from metaservice.db.session import Database
from metaservice.errors import SnapshotExpiredError
from metaservice.names import TableName, dotted_namespace
from metaservice.repositories import leases as leases_repo
from metaservice.repositories import tables as tables_repo
from metaservice.retention.leases import service as leases_service

logger = logging.getLogger(__name__)

TASK_SEPARATOR = ":"


def plan_table_scan(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                    levels: Sequence[str], table: str, body: PlanTableScanRequest,
                    principal: Principal, prefix: str | None = None,
                    guard: idempotency.Guard | None = None) -> dict[str, Any]:
    """Plan a scan of the table; answers ``CompletedPlanningWithIDResult`` (or
    ``FailedPlanningResult``), which is ``guard``'s outcome.

    Raises:
        NoSuchTableError, NoSuchNamespaceError: 404.
        NoSuchReadSessionError: 404, ``prefix`` names no live session of the caller.
        BadRequestError: 400, a scan the table's metadata cannot answer.
        RefusedError: 429 ``too_many_scan_plans``; 410 ``snapshot_expired``, a planned
        snapshot was approved for expiration meanwhile.
        idempotency.Replay: ``guard``'s key was claimed by an earlier request.
    """
    namespace = existing_table_namespace(levels, table)
    name = table_name(catalog, namespace, table)
    if prefix is None:
        with database.reading() as connection:
            location = tables.current_metadata_location(connection, namespace, table)
        metadata = tables.read_metadata(catalog, location)
    else:
        with database.transaction(write=True) as session:
            tables.current_metadata_location(session, namespace, table)
            cut = read_sessions.cut_for(session, ctx, prefix, name, principal)
            location = tables.current_metadata_location(session, namespace, table)
        served = consistent_warehouses.metadata_at(tables.read_metadata(catalog, location),
                                                   cut.snapshot_id, cut.barrier, cut.kind)
        if served is None:
            raise SnapshotExpiredError(
                f"snapshot {cut.snapshot_id} of {name} at barrier {cut.barrier} is no longer "
                "in the table's metadata (expired outside MetaService)",
                snapshots=[{"table": str(name), "snapshot_id": cut.snapshot_id}])
        metadata = served
    scan = Scan(snapshot_id=body.snapshot_id, start_snapshot_id=body.start_snapshot_id,
                end_snapshot_id=body.end_snapshot_id, select=body.select, filter=body.filter,
                case_sensitive=body.case_sensitive, use_snapshot_schema=body.use_snapshot_schema,
                stats_fields=body.stats_fields)
    try:
        with unavailable_as_503(location):
            plan = plan_scan(metadata, location, catalog.warehouse.io(location), scan,
                             ctx.settings.scan_plan_files_per_task, catalog.warehouse.confine)
    except (OSError, ValueError, EOFError) as exc:  # a manifest that cannot be read
        logger.warning("catalog_scan_planning_failed",
                       extra={"table": str(name), "error_class": type(exc).__name__})
        gone = isinstance(exc, FileNotFoundError)
        result = failed(f"the scan of {name} cannot be planned"
                        f"{': a manifest list or manifest is gone' if gone else ''} "
                        f"({type(exc).__name__}: {str(exc)[:300]})",
                        404 if gone else 400)
        if guard is not None:  # nothing was written: the key records it on its own
            guard.outcome = {"body": result}
        return result
    batches = [json.dumps(batch, separators=(",", ":")) for batch in plan.batches]
    with database.transaction(write=True) as session:
        if guard is not None:  # before the plan is counted: a retry holds nothing more
            guard.claim(session)
        pointer = tables_catalog_repo.get_pointer(session, namespace, table)
        if pointer is None or (pointer.table_uuid is not None
                               and pointer.table_uuid != str(metadata.table_uuid)):
            raise NoSuchTableError(f"Table does not exist: {dotted_namespace(namespace, table)} (dropped or "
                                   "replaced while it was planned)")
        plan_id = _record(session, ctx, name, plan, batches, principal, ScanPlanRow(
            namespace=namespace, name=table, table_uuid=str(metadata.table_uuid), prefix=prefix,
            tasks=len(batches), created_at=ctx.clock.now_ms()))
        if len(plan.batches) <= 1:
            whole = (plan.batches[0] if plan.batches
                     else {"file-scan-tasks": [], "delete-files": []})
            result = {"status": "completed", "plan-id": plan_id, **whole}
        else:
            result = {"status": "completed", "plan-id": plan_id,
                      "plan-tasks": _tokens(plan_id, len(batches))}
        if guard is not None:
            guard.finish(session, {"body": result})
    logger.info("catalog_scan_planned", extra={
        "plan_id": plan_id, "table": str(name), "snapshots": list(plan.snapshot_ids),
        "plan_tasks": len(batches)})
    return result


def failed(message: str, code: int) -> dict[str, Any]:
    """A planning that failed (``FailedPlanningResult``): no plan is kept."""
    kind = "NotFoundException" if code == 404 else "BadRequestException"
    return {"status": "failed", "error": {"message": message, "type": kind, "code": code}}


def _record(session: Session, ctx: ServiceContext, name: TableName, plan: Plan, batches: list[str],
            principal: Principal, row: ScanPlanRow) -> str:
    """The plan's lease on its snapshots, and the plan; answers its id."""
    cap = ctx.settings.max_scan_plans
    repo.lock_scan_plans_of(session, principal.name)
    if repo.count_live_scan_plans(session, principal.name, ctx.clock.now_ms()) >= cap:
        who = ("this server's callers (authentication is off) hold" if principal.name is None
               else f"token {principal.name!r} holds")
        raise RefusedError(
            TOO_MANY_SCAN_PLANS,
            f"{who} {cap} live scan plans already (METASERVICE_MAX_SCAN_PLANS); cancel one with "
            "DELETE /iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id} "
            "(the plan-id its planning answered), or wait until one expires "
            f"({ctx.settings.scan_plan_seconds:g} s after it was made)",
            {"limit": cap}, status_code=429)
    table_row = tables_repo.find_table(session, name)
    held = [] if table_row is None else [(str(name), table_row.id, s)
                                         for s in plan.snapshot_ids]
    lease = leases_service.open_scan_plan_lease(session, ctx, f"scan plan of {name}", held,
                                                principal)
    row.id = lease.lease_id
    repo.insert_scan_plan(session, row, batches)
    return lease.lease_id


def _tokens(plan_id: str, count: int) -> list[str]:
    return [f"{plan_id}{TASK_SEPARATOR}{seq}" for seq in range(count)]


def _live_plan(session: Session, ctx: ServiceContext, levels: Sequence[str], table: str,
               plan_id: str, principal: Principal,
               prefix: str | None) -> tuple[ScanPlanRow, LeaseRow] | None:
    """The live plan ``plan_id`` of this table, made at the same prefix, that ``principal``
    may see; None otherwise. The table must exist (404 before the plan's)."""
    namespace = existing_table_namespace(levels, table)
    if prefix is not None:
        read_sessions.ensure_live(session, ctx, prefix, principal)
    pointer = tables_catalog_repo.get_pointer(session, namespace, table)
    if pointer is None:
        raise NoSuchTableError(f"Table does not exist: {dotted_namespace(namespace, table)}")
    found = repo.get_scan_plan(session, plan_id) if "\x00" not in plan_id else None
    if (found is None or found[1].expires_at <= ctx.clock.now_ms()
            or not leases_service.visible_to(found[1], principal)
            or (found[0].namespace, found[0].name, found[0].prefix) != (namespace, table, prefix)
            or (pointer.table_uuid is not None and pointer.table_uuid != found[0].table_uuid)):
        return None  # a later table of the same name is another table
    return found


def fetch_planning_result(session: Session, ctx: ServiceContext, levels: Sequence[str],
                          table: str, plan_id: str, principal: Principal,
                          prefix: str | None = None) -> dict[str, Any]:
    """``GET …/plan/{plan-id}``: a live plan's plan tasks.

    Raises:
        NoSuchPlanIdError: 404, no live plan of the caller's by that id for this table.
    """
    found = _live_plan(session, ctx, levels, table, plan_id, principal, prefix)
    if found is None:
        raise _no_plan(plan_id)
    return {"status": "completed", "plan-tasks": _tokens(plan_id, found[0].tasks)}


def cancel_planning(session: Session, ctx: ServiceContext, levels: Sequence[str], table: str,
                    plan_id: str, principal: Principal, prefix: str | None = None,
                    guard: idempotency.Guard | None = None) -> None:
    """``DELETE …/plan/{plan-id}``: the plan ends and its snapshots are no longer held by it.

    Raises:
        NoSuchPlanIdError: 404, no live plan of the caller's by that id for this table.
        idempotency.Replay: ``guard``'s key was claimed by an earlier request.
    """
    if guard is not None:
        guard.claim(session)
    found = _live_plan(session, ctx, levels, table, plan_id, principal, prefix)
    if found is None:
        raise _no_plan(plan_id)
    leases_repo.delete_lease(session, plan_id)
    if guard is not None:
        guard.finish(session, {})
    logger.info("catalog_scan_plan_cancelled", extra={"plan_id": plan_id})


def fetch_scan_tasks(session: Session, ctx: ServiceContext, levels: Sequence[str], table: str,
                     plan_task: str, principal: Principal,
                     prefix: str | None = None) -> str:
    """``POST …/tasks``: the file scan tasks of one plan task of a live plan, as stored (the
    answer's JSON).

    Raises:
        NoSuchPlanTaskError: 404, no such plan task of a live plan of the caller's.
    """
    plan_id, _, seq = plan_task.rpartition(TASK_SEPARATOR)
    found = (_live_plan(session, ctx, levels, table, plan_id, principal, prefix)
             if plan_id and seq.isdigit() and len(seq) < 10 and str(int(seq)) == seq
             else None)
    content = None if found is None else repo.plan_task(session, plan_id, int(seq))
    if content is None:
        raise NoSuchPlanTaskError(f"The plan task does not exist: {plan_task!r} (its plan was "
                                  "cancelled, expired, or never was)")
    return content


def _no_plan(plan_id: str) -> NoSuchPlanIdError:
    return NoSuchPlanIdError(f"The plan id does not exist: {plan_id!r} (cancelled, expired, or "
                             "never was)")
