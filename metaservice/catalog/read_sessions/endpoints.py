"""The routes of a consistent warehouse's read sessions (HTTP only; docs/contract.md#read-sessions),
under ``/iceberg/v1/{prefix}``: the same reads as at the head, under a session's prefix, with tables
served (and scans planned) at the session's cut; every write is refused.

``router`` is included before every other catalog router. Routes are matched one after the
other in the order they were included, so a session's table load is not tried against every
route of the head first; and the prefix is a path parameter that matches only a session's
prefix (``session-…``, ``view-…``), so that no route here, the refusal of writes (a
catch-all) included, takes one of the head's paths (``POST /iceberg/v1/tables/rename``, a
namespace named ``namespaces``). A path whose prefix cannot name a session matches no route
(404).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from starlette.convertors import Convertor, register_url_convertor

from metaservice.catalog.deps import (
    PREFIX,
    AccessDelegation,
    IfNoneMatch,
    levels,
    principal,
    site,
)
from metaservice.catalog.errors import ForbiddenError
from metaservice.catalog.namespaces.answers import (
    list_functions,
    list_namespaces,
    load_function,
    load_namespace,
    namespace_exists,
)
from metaservice.catalog.read_sessions import service as read_sessions
from metaservice.catalog.requests import (
    FetchScanTasksRequest,
    PlanTableScanRequest,
    ReportMetricsRequest,
)
from metaservice.catalog.scan_plans import answers as scan_plan_answers
from metaservice.catalog.scan_plans import service as scan_plans
from metaservice.catalog.schemas import ICEBERG_ERROR_RESPONSES, PageSize, PageToken, PlanId
from metaservice.catalog.tables import service as tables
from metaservice.catalog.tables.answers import (
    Snapshots,
    list_tables,
    load_credentials,
    report_metrics,
    table_exists,
    table_response,
    vended_access,
)
from metaservice.deps import Context, DatabaseDep, ReadSession


class SessionPrefixConvertor(Convertor[str]):
    """A path segment that can name a read session: ``session-<id>`` or ``view-<id>``."""

    regex = "(?:" + "|".join(re.escape(p) for p in (read_sessions.PREFIX,
                                                     *read_sessions.LEGACY_PREFIXES)) + ")[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("read_session", SessionPrefixConvertor())

router = APIRouter(prefix=PREFIX + "/v1/{prefix:read_session}", tags=["iceberg"],
                   responses=ICEBERG_ERROR_RESPONSES)


def _in_session(session: ReadSession, request: Request, ctx: Context, prefix: str) -> None:
    read_sessions.ensure_live(session, ctx, prefix, principal(request))


@router.get("/namespaces", operation_id="iceberg_session_list_namespaces")
def list_namespaces_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                               parent: Annotated[str | None, Query(max_length=1000)] = None,
                               page_token: PageToken = None, page_size: PageSize = None,
                               ) -> dict[str, Any]:
    _in_session(session, request, ctx, prefix)
    return list_namespaces(session, parent, page_token, page_size)


@router.get("/namespaces/{namespace}", operation_id="iceberg_session_load_namespace")
def load_namespace_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                              namespace: str) -> dict[str, Any]:
    _in_session(session, request, ctx, prefix)
    return load_namespace(session, namespace)


@router.head("/namespaces/{namespace}", status_code=204,
                     operation_id="iceberg_session_namespace_exists")
def namespace_exists_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                                namespace: str) -> Response:
    _in_session(session, request, ctx, prefix)
    return namespace_exists(session, namespace)


@router.get("/namespaces/{namespace}/functions", operation_id="iceberg_session_list_functions")
def list_functions_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                              namespace: str, page_token: PageToken = None,
                              page_size: PageSize = None) -> dict[str, Any]:
    _in_session(session, request, ctx, prefix)
    return list_functions(session, namespace, page_token, page_size)


@router.get("/namespaces/{namespace}/functions/{function}",
            operation_id="iceberg_session_load_function")
def load_function_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                             namespace: str, function: str) -> dict[str, Any]:
    _in_session(session, request, ctx, prefix)
    return load_function(session, namespace, function)


@router.get("/namespaces/{namespace}/tables", operation_id="iceberg_session_list_tables")
def list_tables_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                           namespace: str, page_token: PageToken = None,
                           page_size: PageSize = None) -> dict[str, Any]:
    _in_session(session, request, ctx, prefix)
    return list_tables(session, namespace, page_token, page_size)


@router.get("/namespaces/{namespace}/tables/{table}",
                    operation_id="iceberg_session_load_table")
def load_table_in_session(request: Request, database: DatabaseDep, ctx: Context, prefix: str,
                          namespace: str, table: str,
                          snapshots: Snapshots = "all",
                          if_none_match: IfNoneMatch = None,
                          access_delegation: AccessDelegation = None) -> Response:
    """The table at the read session's cut: fixed at the first load of its pipeline, leased
    for the session; its ``ETag`` names the cut file. Vended credentials read only."""
    loaded = tables.load_table_in_session(
        database, ctx, site(request), prefix, principal(request), levels(namespace), table,
        snapshots)
    return table_response(loaded, if_none_match, vended_access(
        request, database, namespace, table, loaded, access_delegation, session_prefix=prefix))


@router.get("/namespaces/{namespace}/tables/{table}/credentials",
            operation_id="iceberg_session_load_credentials")
def load_credentials_in_session(session: ReadSession, request: Request, database: DatabaseDep,
                                ctx: Context, prefix: str, namespace: str,
                                table: str) -> dict[str, Any]:
    """Fresh read-only credentials for the table's files."""
    _in_session(session, request, ctx, prefix)
    return load_credentials(request, database, namespace, table, session_prefix=prefix)


@router.head("/namespaces/{namespace}/tables/{table}", status_code=204,
                     operation_id="iceberg_session_table_exists")
def table_exists_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                            namespace: str, table: str) -> Response:
    _in_session(session, request, ctx, prefix)
    return table_exists(session, namespace, table)


@router.post("/namespaces/{namespace}/tables/{table}/metrics", status_code=204,
                     operation_id="iceberg_session_report_metrics")
def report_metrics_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                              namespace: str, table: str, body: ReportMetricsRequest) -> Response:
    _in_session(session, request, ctx, prefix)
    return report_metrics(request, namespace, table, body)


@router.post("/namespaces/{namespace}/tables/{table}/plan",
             operation_id="iceberg_session_plan_table_scan", response_model=dict[str, Any])
def plan_table_scan_in_session(request: Request, database: DatabaseDep, ctx: Context,
                               prefix: str, namespace: str, table: str,
                               body: PlanTableScanRequest) -> Response:
    """Plan a scan at the read session's cut (fixed now if the table's pipeline has none yet
    in the session), held against expiration while the plan lives; ``Idempotency-Key``
    honoured."""
    return scan_plan_answers.plan_table_scan(request, database, ctx, namespace, table, body,
                                             prefix)


@router.get("/namespaces/{namespace}/tables/{table}/plan/{plan_id}",
            operation_id="iceberg_session_fetch_planning_result")
def fetch_planning_result_in_session(request: Request, session: ReadSession, ctx: Context,
                                     prefix: str, namespace: str, table: str,
                                     plan_id: PlanId) -> dict[str, Any]:
    return scan_plans.fetch_planning_result(session, ctx, levels(namespace), table, plan_id,
                                            principal(request), prefix)


@router.delete("/namespaces/{namespace}/tables/{table}/plan/{plan_id}", status_code=204,
               operation_id="iceberg_session_cancel_planning")
def cancel_planning_in_session(request: Request, database: DatabaseDep, ctx: Context,
                               prefix: str, namespace: str, table: str,
                               plan_id: PlanId) -> Response:
    return scan_plan_answers.cancel_planning(request, database, ctx, namespace, table, plan_id,
                                             prefix)


@router.post("/namespaces/{namespace}/tables/{table}/tasks",
             operation_id="iceberg_session_fetch_scan_tasks")
def fetch_scan_tasks_in_session(request: Request, session: ReadSession, ctx: Context,
                                prefix: str, namespace: str, table: str,
                                body: FetchScanTasksRequest) -> Response:
    return Response(scan_plans.fetch_scan_tasks(session, ctx, levels(namespace), table,
                                                body.plan_task, principal(request), prefix),
                    media_type="application/json")


@router.post("/{path:path}", status_code=204, operation_id="iceberg_session_post")
@router.put("/{path:path}", status_code=204, operation_id="iceberg_session_put")
@router.delete("/{path:path}", status_code=204, operation_id="iceberg_session_delete")
def write_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                     path: str) -> Response:
    """Read sessions are read-only: every change goes through the head (warehouse ``lake``)."""
    _in_session(session, request, ctx, prefix)
    raise ForbiddenError("this is a read-only session of a consistent warehouse "
                         "(docs/concepts.md#read-session): "
                         "commit through the head, warehouse without @…")
