"""The catalog's table routes (HTTP only), under ``/iceberg``: list, create, register, load,
exists, drop, unregister, rename, metrics reports, and scan planning (plan, its result, its
cancel, its tasks). Commits are ``commit_endpoints.py``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Query, Request, Response
from fastapi.responses import JSONResponse

from metaservice.catalog import idempotency
from metaservice.catalog.deps import (
    PREFIX,
    AccessDelegation,
    IfNoneMatch,
    context,
    levels,
    principal,
    purges,
    site,
)
from metaservice.catalog.requests import (
    CreateTableRequest,
    FetchScanTasksRequest,
    PlanTableScanRequest,
    RegisterTableRequest,
    RenameTableRequest,
    ReportMetricsRequest,
    S3SignRequest,
)
from metaservice.catalog.scan_plans import answers as scan_plan_answers
from metaservice.catalog.scan_plans import service as scan_plans
from metaservice.catalog.schemas import ICEBERG_ERROR_RESPONSES, PageSize, PageToken, PlanId
from metaservice.catalog.tables import answers, delegation
from metaservice.catalog.tables import service as tables
from metaservice.catalog.tables.answers import Snapshots, table_response, vended_access
from metaservice.catalog.tables.idempotent import idempotent
from metaservice.deps import Context, DatabaseDep, ReadSession

router = APIRouter(prefix=PREFIX, tags=["iceberg"], responses=ICEBERG_ERROR_RESPONSES)


@router.get("/v1/namespaces/{namespace}/tables", operation_id="iceberg_list_tables")
def list_tables(session: ReadSession, namespace: str, page_token: PageToken = None,
                page_size: PageSize = None) -> dict[str, Any]:
    """Tables in name order; with ``pageToken`` (empty to start) a page at a time."""
    return answers.list_tables(session, namespace, page_token, page_size)


@router.post("/v1/namespaces/{namespace}/tables", operation_id="iceberg_create_table")
def create_table(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                 body: CreateTableRequest,
                 access_delegation: AccessDelegation = None) -> Response:
    def run(guard: idempotency.Guard | None) -> Response:
        loaded = tables.create_table(database, ctx, site(request), levels(namespace), body,
                                     principal(request), guard)
        return table_response(loaded, access=vended_access(
            request, database, namespace, body.name, loaded, access_delegation))

    return idempotent(request, database, ctx, "createTable", 200, run, body)


@router.post("/v1/namespaces/{namespace}/register", operation_id="iceberg_register_table")
def register_table(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                   body: RegisterTableRequest,
                   access_delegation: AccessDelegation = None) -> Response:
    def run(guard: idempotency.Guard | None) -> Response:
        loaded = tables.register_table(
            database, ctx, site(request), levels(namespace), body.name,
            body.metadata_location, body.overwrite, principal(request), guard)
        return table_response(loaded, access=vended_access(
            request, database, namespace, body.name, loaded, access_delegation))

    return idempotent(request, database, ctx, "registerTable", 200, run, body)


@router.get("/v1/namespaces/{namespace}/tables/{table}", operation_id="iceberg_load_table")
def load_table(request: Request, database: DatabaseDep, namespace: str, table: str,
               snapshots: Snapshots = "all", if_none_match: IfNoneMatch = None,
               access_delegation: AccessDelegation = None) -> Response:
    """The table's metadata with its ``ETag``; 304 when ``If-None-Match`` names it. With
    ``X-Iceberg-Access-Delegation: vended-credentials``, credentials for its files."""
    loaded = tables.load_table(database, site(request), levels(namespace), table, snapshots,
                               if_none_match)
    return table_response(loaded, access=vended_access(request, database, namespace, table,
                                                        loaded, access_delegation))


@router.get("/v1/namespaces/{namespace}/tables/{table}/credentials",
            operation_id="iceberg_load_credentials")
def load_credentials(request: Request, database: DatabaseDep, namespace: str,
                     table: str) -> dict[str, Any]:
    """Fresh credentials for the table's files (none when the catalog vends none); 503 when
    STS fails."""
    return answers.load_credentials(request, database, namespace, table)


@router.head("/v1/namespaces/{namespace}/tables/{table}", status_code=204,
             operation_id="iceberg_table_exists")
def table_exists(session: ReadSession, namespace: str, table: str) -> Response:
    return answers.table_exists(session, namespace, table)


@router.delete("/v1/namespaces/{namespace}/tables/{table}", status_code=204,
               operation_id="iceberg_drop_table")
def drop_table(request: Request, database: DatabaseDep, namespace: str, table: str,
               background: BackgroundTasks,
               purge_requested: Annotated[bool, Query(alias="purgeRequested")] = False,
               ) -> Response:
    def run(guard: idempotency.Guard | None) -> Response:
        worker = purges(request) if purge_requested else None
        dropped = tables.drop_table(database, site(request), levels(namespace), table,
                                    principal(request), guard, purges=worker)
        if worker is not None:  # after the drop committed: a while before the answer, then after
            if dropped.purge is not None and not (
                    worker.answer_seconds > 0
                    and worker.purge(dropped.purge, seconds=worker.answer_seconds)):
                background.add_task(worker.purge, dropped.purge)
            background.add_task(site(request).warehouse.delete_cut_files, dropped.cut_files)
        return Response(status_code=204)

    return idempotent(request, database, context(request), "dropTable", 204, run)


@router.post("/v1/namespaces/{namespace}/tables/{table}/unregister",
             operation_id="iceberg_unregister_table")
def unregister_table(request: Request, database: DatabaseDep, namespace: str,
                     table: str) -> Response:
    """Forget the table without deleting any file (refused where a drop is); answers its last
    metadata location and metadata, for another catalog to register."""
    def run(guard: idempotency.Guard | None) -> Response:
        return table_response(tables.unregister_table(
            database, site(request), levels(namespace), table, principal(request), guard))

    return idempotent(request, database, context(request), "unregisterTable", 200, run)


@router.post("/v1/tables/rename", status_code=204, operation_id="iceberg_rename_table")
def rename_table(request: Request, database: DatabaseDep, ctx: Context,
                 body: RenameTableRequest) -> Response:
    source, destination = body.source, body.destination

    def run(guard: idempotency.Guard | None) -> Response:
        with database.transaction(write=True) as session:
            if guard is not None:
                guard.claim(session)
            tables.rename_table(session, ctx, site(request), principal(request),
                                source.namespace, source.name, destination.namespace,
                                destination.name)
            if guard is not None:
                guard.finish(session, {})
        return Response(status_code=204)

    return idempotent(request, database, ctx, "renameTable", 204, run, body)


@router.post("/v1/namespaces/{namespace}/tables/{table}/metrics", status_code=204,
             operation_id="iceberg_report_metrics")
def report_metrics(request: Request, namespace: str, table: str,
                   body: ReportMetricsRequest) -> Response:
    """Metrics reports are counted by kind and otherwise dropped; never an error."""
    return answers.report_metrics(request, namespace, table, body)


@router.post("/v1/aws/s3/sign", operation_id="iceberg_sign_s3_request")
def sign_s3_request(request: Request, database: DatabaseDep, body: S3SignRequest) -> Response:
    """The Iceberg S3 signer: a request to a table's files signed with the server's keys, when
    the caller may make it (``delegation.signed_headers``); 403 otherwise."""
    headers = delegation.signed_headers(database, site(request), principal(request),
                                        body.method, body.uri, body.headers)
    return JSONResponse({"uri": body.uri, "headers": headers},
                        headers={"Cache-Control": "no-cache"})


# -- server-side scan planning (docs/contract.md#scan-planning) -------------------------------

@router.post("/v1/namespaces/{namespace}/tables/{table}/plan",
             operation_id="iceberg_plan_table_scan", response_model=dict[str, Any])
def plan_table_scan(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                    table: str, body: PlanTableScanRequest) -> Response:
    """Plan a scan at the head: the files of the request's snapshot (default the current one),
    held against expiration while the plan lives; ``Idempotency-Key`` honoured."""
    return scan_plan_answers.plan_table_scan(request, database, ctx, namespace, table, body)


@router.get("/v1/namespaces/{namespace}/tables/{table}/plan/{plan_id}",
            operation_id="iceberg_fetch_planning_result")
def fetch_planning_result(request: Request, session: ReadSession, ctx: Context, namespace: str,
                          table: str, plan_id: PlanId) -> dict[str, Any]:
    return scan_plans.fetch_planning_result(session, ctx, levels(namespace), table, plan_id,
                                            principal(request))


@router.delete("/v1/namespaces/{namespace}/tables/{table}/plan/{plan_id}", status_code=204,
               operation_id="iceberg_cancel_planning")
def cancel_planning(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                    table: str, plan_id: PlanId) -> Response:
    return scan_plan_answers.cancel_planning(request, database, ctx, namespace, table, plan_id)


@router.post("/v1/namespaces/{namespace}/tables/{table}/tasks",
             operation_id="iceberg_fetch_scan_tasks")
def fetch_scan_tasks(request: Request, session: ReadSession, ctx: Context, namespace: str,
                     table: str, body: FetchScanTasksRequest) -> Response:
    return Response(scan_plans.fetch_scan_tasks(session, ctx, levels(namespace), table,
                                                body.plan_task, principal(request)),
                    media_type="application/json")
