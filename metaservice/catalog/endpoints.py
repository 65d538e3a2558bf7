"""The Iceberg REST catalog's routes (HTTP only), mounted under ``/iceberg``.

Paths, status codes and bodies follow the Iceberg REST catalog OpenAPI specification; the
catalog serves no ``prefix`` (``/iceberg/v1/namespaces``…). Every error of these routes,
authentication included, is rendered in the Iceberg error model.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Body, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import Counter
from pydantic import ValidationError
from pyiceberg.catalog.rest import RegisterTableRequest
from pyiceberg.table import CommitTableRequest
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from metaservice.auth.policy import Role
from metaservice.auth.service import ANONYMOUS_ADMIN, Principal
from metaservice.catalog import read_sessions, service, validation, views
from metaservice.catalog.errors import (
    BadRequestError,
    ForbiddenError,
    IcebergError,
    NoSuchReadSessionError,
    iceberg_body,
)
from metaservice.catalog.schemas import ICEBERG_ERROR_RESPONSES
from metaservice.catalog.service import CatalogSite, LoadedTable
from metaservice.catalog.storage import Warehouse
from metaservice.deps import Context, ReadSession, WriteSession
from metaservice.errors import MetaServiceError
from metaservice.settings import Settings

logger = logging.getLogger(__name__)

PREFIX = "/iceberg"
NAMESPACE_SEPARATOR = "\x1f"


def iceberg_error_response(exc: Exception) -> JSONResponse:
    """Any error of a catalog route, in the Iceberg error model."""
    if isinstance(exc, IcebergError):
        return JSONResponse(exc.to_body(), status_code=exc.status_code)
    if isinstance(exc, MetaServiceError):
        return JSONResponse(
            iceberg_body(exc.status_code, f"metaservice {exc.code}: {exc.message}"),
            status_code=exc.status_code, headers=exc.headers)
    if isinstance(exc, (RequestValidationError, ValidationError)):
        problems = exc.errors()
        first = problems[0] if problems else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return JSONResponse(iceberg_body(400, f"{where}: {first['msg']}"), status_code=400)
    if isinstance(exc, StarletteHTTPException):
        return JSONResponse(iceberg_body(exc.status_code, str(exc.detail)),
                            status_code=exc.status_code, headers=exc.headers)
    if isinstance(exc, OperationalError):
        logger.warning("database_error", extra={"error_class": type(exc.orig).__name__})
        return JSONResponse(iceberg_body(503, "the database is unavailable or busy; retry later"),
                            status_code=503, headers={"Retry-After": "1"})
    logger.exception("unhandled_error", exc_info=exc)
    return JSONResponse(iceberg_body(500, "internal error", "InternalServerError"),
                        status_code=500)


def _install_error_rendering(app: FastAPI) -> None:
    """Errors of ``/iceberg/…`` requests answer in the Iceberg error model, every other error
    as before. The app's handlers are wrapped (not the routes), so an error still reaches the
    session dependency first and rolls the transaction back."""
    Handler = Callable[[Request, Any], Any]

    def for_catalog(original: Handler | None) -> Handler:
        async def handle(request: Request, exc: Exception) -> Response:
            if request.url.path.startswith(PREFIX + "/") or original is None:
                return iceberg_error_response(exc)
            answer = original(request, exc)
            return await answer if inspect.isawaitable(answer) else answer  # type: ignore[no-any-return]
        return handle

    handlers = app.exception_handlers
    for exc_class in list(handlers):
        handlers[exc_class] = for_catalog(handlers[exc_class])
    for exc_class in (IcebergError, ValidationError):
        handlers[exc_class] = for_catalog(handlers.get(Exception))


router = APIRouter(prefix=PREFIX, tags=["iceberg"], responses=ICEBERG_ERROR_RESPONSES)

# Every endpoint of the specification this catalog serves, as ``config`` lists them.
ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/transactions/commit",
]


def _site(request: Request) -> CatalogSite:
    return request.app.state.catalog  # type: ignore[no-any-return]


def _levels(namespace: str) -> list[str]:
    return namespace.split(NAMESPACE_SEPARATOR)


def _principal(request: Request) -> Principal:
    return getattr(request.state, "principal", None) or ANONYMOUS_ADMIN


def _actor(request: Request) -> str | None:
    """The token whose job ownership a commit checks: only a writer's (an admin may act for
    any job; with authentication disabled everyone is an admin)."""
    principal = getattr(request.state, "principal", None)
    if principal is not None and principal.role == Role.writer:
        return principal.name  # type: ignore[no-any-return]
    return None


def _table_response(loaded: LoadedTable) -> Response:
    parts = []
    if loaded.metadata_location is not None:
        parts.append(f'"metadata-location":{json.dumps(loaded.metadata_location)}')
    parts.append(f'"metadata":{loaded.metadata.model_dump_json()}')
    parts.append('"config":{}')
    return Response("{" + ",".join(parts) + "}", media_type="application/json")


JsonObject = Annotated[dict[str, Any], Body()]


# -- configuration -----------------------------------------------------------------------------


@router.get("/v1/config", operation_id="iceberg_get_config")
def get_config(request: Request, session: WriteSession, ctx: Context,
               warehouse: Annotated[str | None, Query(max_length=200)] = None) -> dict[str, Any]:
    """The catalog's configuration and the endpoints it serves. A view's warehouse
    (``lake@strong``, ``lake@barrier=<B>``) opens a read session, named by the ``prefix`` of
    the answer's overrides (SPEC §12)."""
    site = _site(request)
    view = views.parse_warehouse(warehouse, site.name)
    if view is None:
        return {"defaults": {}, "overrides": {}, "endpoints": ENDPOINTS}
    prefix = read_sessions.open_session(session, ctx, site.name, view, _principal(request))
    # Every endpoint is listed, so that a client sends its commit and hears why it is refused.
    return {"defaults": {}, "overrides": {"prefix": prefix}, "endpoints": ENDPOINTS}


# -- namespaces --------------------------------------------------------------------------------


@router.get("/v1/namespaces", operation_id="iceberg_list_namespaces")
def list_namespaces(session: ReadSession,
                    parent: Annotated[str | None, Query(max_length=1000)] = None,
                    ) -> dict[str, Any]:
    return {"namespaces": service.list_namespaces(
        session, _levels(parent) if parent else None)}


@router.post("/v1/namespaces", operation_id="iceberg_create_namespace")
def create_namespace(session: WriteSession, ctx: Context, body: JsonObject) -> dict[str, Any]:
    namespace = body.get("namespace")
    properties = body.get("properties") or {}
    if (not isinstance(namespace, list) or not all(isinstance(p, str) for p in namespace)
            or not isinstance(properties, dict)):
        raise BadRequestError("body must be {\"namespace\": [str, …], \"properties\": {…}}")
    levels, props = service.create_namespace(
        session, ctx, namespace, {str(k): str(v) for k, v in properties.items()})
    return {"namespace": levels, "properties": props}


@router.get("/v1/namespaces/{namespace}", operation_id="iceberg_load_namespace")
def load_namespace(session: ReadSession, namespace: str) -> dict[str, Any]:
    return {"namespace": _levels(namespace),
            "properties": service.load_namespace(session, _levels(namespace))}


@router.head("/v1/namespaces/{namespace}", status_code=204,
             operation_id="iceberg_namespace_exists")
def namespace_exists(session: ReadSession, namespace: str) -> Response:
    service.load_namespace(session, _levels(namespace))
    return Response(status_code=204)


@router.delete("/v1/namespaces/{namespace}", status_code=204,
               operation_id="iceberg_drop_namespace")
def drop_namespace(session: WriteSession, namespace: str) -> Response:
    service.drop_namespace(session, _levels(namespace))
    return Response(status_code=204)


@router.post("/v1/namespaces/{namespace}/properties",
             operation_id="iceberg_update_namespace_properties")
def update_namespace_properties(session: WriteSession, namespace: str,
                                body: JsonObject) -> dict[str, Any]:
    removals = body.get("removals") or []
    updates = body.get("updates") or {}
    if not isinstance(removals, list) or not isinstance(updates, dict):
        raise BadRequestError("body must be {\"removals\": [str, …], \"updates\": {…}}")
    return service.update_namespace_properties(
        session, _levels(namespace), [str(r) for r in removals],
        {str(k): str(v) for k, v in updates.items()})


# -- tables ------------------------------------------------------------------------------------


@router.get("/v1/namespaces/{namespace}/tables", operation_id="iceberg_list_tables")
def list_tables(session: ReadSession, namespace: str) -> dict[str, Any]:
    levels = _levels(namespace)
    return {"identifiers": [{"namespace": levels, "name": name}
                            for name in service.list_tables(session, levels)]}


@router.post("/v1/namespaces/{namespace}/tables", operation_id="iceberg_create_table")
def create_table(request: Request, session: WriteSession, ctx: Context, namespace: str,
                 body: JsonObject) -> Response:
    parsed = validation.create_table_request(body)
    return _table_response(service.create_table(session, ctx, _site(request),
                                                _levels(namespace), parsed))


@router.post("/v1/namespaces/{namespace}/register", operation_id="iceberg_register_table")
def register_table(request: Request, session: WriteSession, ctx: Context, namespace: str,
                   body: JsonObject) -> Response:
    parsed = RegisterTableRequest.model_validate({"overwrite": False, **body})
    return _table_response(service.register_table(
        session, ctx, _site(request), _levels(namespace), parsed.name, parsed.metadata_location,
        parsed.overwrite))


@router.get("/v1/namespaces/{namespace}/tables/{table}", operation_id="iceberg_load_table")
def load_table(request: Request, session: ReadSession, namespace: str, table: str,
               snapshots: Annotated[str, Query(pattern="^(all|refs)$")] = "all") -> Response:
    return _table_response(service.load_table(session, _site(request), _levels(namespace),
                                              table, snapshots))


@router.head("/v1/namespaces/{namespace}/tables/{table}", status_code=204,
             operation_id="iceberg_table_exists")
def table_exists(session: ReadSession, namespace: str, table: str) -> Response:
    service.table_exists(session, _levels(namespace), table)
    return Response(status_code=204)


@router.post("/v1/namespaces/{namespace}/tables/{table}", operation_id="iceberg_commit_table")
def commit_table(request: Request, session: WriteSession, ctx: Context, namespace: str,
                 table: str, body: JsonObject, background: BackgroundTasks) -> Response:
    """Commit updates to a table; SPEC §11's rules apply in the same transaction."""
    name = service.namespace_name(_levels(namespace))
    parsed = service.parse_commit(body, namespace=name, table=table)
    (staged,) = service.commit_tables(
        session, ctx, _site(request), [(name, table, parsed)],
        actor=_actor(request))
    _delete_removed_cut_files(request, background, [staged])
    return _table_response(LoadedTable(staged.metadata, staged.metadata_location))


@router.delete("/v1/namespaces/{namespace}/tables/{table}", status_code=204,
               operation_id="iceberg_drop_table")
def drop_table(request: Request, session: WriteSession, namespace: str, table: str,
               background: BackgroundTasks,
               purge_requested: Annotated[bool, Query(alias="purgeRequested")] = False,
               ) -> Response:
    dropped = service.drop_table(session, _site(request), _levels(namespace), table)
    if purge_requested:  # after the drop committed (the response is sent after the commit)
        warehouse = _site(request).warehouse
        background.add_task(warehouse.purge, dropped.metadata_location)
        background.add_task(warehouse.delete_cut_files, dropped.cut_files)
    return Response(status_code=204)


@router.post("/v1/tables/rename", status_code=204, operation_id="iceberg_rename_table")
def rename_table(request: Request, session: WriteSession, ctx: Context,
                 body: JsonObject) -> Response:
    try:
        source, destination = body["source"], body["destination"]
        args = (list(source["namespace"]), str(source["name"]),
                list(destination["namespace"]), str(destination["name"]))
    except (KeyError, TypeError) as exc:
        raise BadRequestError("body must be {\"source\": {\"namespace\": […], \"name\": …}, "
                              "\"destination\": {…}}") from exc
    service.rename_table(session, ctx, _site(request), *args)
    return Response(status_code=204)


@router.post("/v1/namespaces/{namespace}/tables/{table}/metrics", status_code=204,
             operation_id="iceberg_report_metrics")
def report_metrics(request: Request, namespace: str, table: str,
                   body: JsonObject) -> Response:
    """Metrics reports are counted by kind and otherwise dropped; never an error."""
    kind = str(body.get("report-type", "unknown"))[:40]
    request.app.state.catalog_metrics.labels(
        kind if kind in ("scan-report", "commit-report") else "other").inc()
    return Response(status_code=204)


@router.post("/v1/transactions/commit", status_code=204,
             operation_id="iceberg_commit_transaction")
def commit_transaction(request: Request, session: WriteSession, ctx: Context,
                       body: JsonObject, background: BackgroundTasks) -> Response:
    """Commit to several tables at once: every table or none."""
    changes = body.get("table-changes")
    if not isinstance(changes, list) or not changes:
        raise BadRequestError("body must be {\"table-changes\": [commit, …]} with at least one")
    requests: list[tuple[str, str, CommitTableRequest]] = []
    for change in changes:
        parsed = service.parse_commit(change)
        requests.append((service.namespace_name(list(parsed.identifier.namespace.root)),
                         parsed.identifier.name, parsed))
    staged = service.commit_tables(session, ctx, _site(request), requests,
                                   actor=_actor(request))
    _delete_removed_cut_files(request, background, staged)
    return Response(status_code=204)


def _delete_removed_cut_files(request: Request, background: BackgroundTasks,
                              staged: list[service.StagedCommit]) -> None:
    """The cut files of snapshots a commit removed go after it committed (the response, and
    so the background task, comes after the commit)."""
    removed = [location for one in staged for location in one.removed_cut_files]
    if removed:
        background.add_task(_site(request).warehouse.delete_cut_files, removed)


# -- views (SPEC §12): the same reads under a read session's prefix; writes are refused -------

view_router = APIRouter(prefix=PREFIX + "/v1/{prefix}", tags=["iceberg"],
                        responses=ICEBERG_ERROR_RESPONSES)


@view_router.get("/namespaces", operation_id="iceberg_view_list_namespaces")
def list_namespaces_in_view(session: ReadSession, prefix: str,
                            parent: Annotated[str | None, Query(max_length=1000)] = None,
                            ) -> dict[str, Any]:
    return list_namespaces(session, parent)


@view_router.get("/namespaces/{namespace}", operation_id="iceberg_view_load_namespace")
def load_namespace_in_view(session: ReadSession, prefix: str, namespace: str) -> dict[str, Any]:
    return load_namespace(session, namespace)


@view_router.head("/namespaces/{namespace}", status_code=204,
                  operation_id="iceberg_view_namespace_exists")
def namespace_exists_in_view(session: ReadSession, prefix: str, namespace: str) -> Response:
    return namespace_exists(session, namespace)


@view_router.get("/namespaces/{namespace}/tables", operation_id="iceberg_view_list_tables")
def list_tables_in_view(session: ReadSession, prefix: str, namespace: str) -> dict[str, Any]:
    return list_tables(session, namespace)


@view_router.get("/namespaces/{namespace}/tables/{table}",
                 operation_id="iceberg_view_load_table")
def load_table_in_view(request: Request, session: WriteSession, ctx: Context, prefix: str,
                       namespace: str, table: str,
                       snapshots: Annotated[str, Query(pattern="^(all|refs)$")] = "all",
                       ) -> Response:
    """The table at the read session's cut: fixed at the first load of its pipeline, leased
    for the session."""
    return _table_response(service.load_table_in_view(
        session, ctx, _site(request), prefix, _principal(request), _levels(namespace), table,
        snapshots))


@view_router.head("/namespaces/{namespace}/tables/{table}", status_code=204,
                  operation_id="iceberg_view_table_exists")
def table_exists_in_view(session: ReadSession, prefix: str, namespace: str,
                         table: str) -> Response:
    return table_exists(session, namespace, table)


@view_router.post("/namespaces/{namespace}/tables/{table}/metrics", status_code=204,
                  operation_id="iceberg_view_report_metrics")
def report_metrics_in_view(request: Request, prefix: str, namespace: str, table: str,
                           body: JsonObject) -> Response:
    return report_metrics(request, namespace, table, body)


@view_router.post("/{path:path}", status_code=204, operation_id="iceberg_view_post")
@view_router.put("/{path:path}", status_code=204, operation_id="iceberg_view_put")
@view_router.delete("/{path:path}", status_code=204, operation_id="iceberg_view_delete")
def write_in_view(prefix: str, path: str) -> Response:
    """Views are read-only: every change goes through the head (warehouse ``lake``)."""
    if not prefix.startswith(read_sessions.PREFIX):
        raise NoSuchReadSessionError(f"no route {path!r} under {prefix!r}")
    raise ForbiddenError("this is a read-only view of the catalog (SPEC §12): commit through "
                         "the head, warehouse without @…")


def install_catalog(app: FastAPI, settings: Settings) -> None:
    """Mount the catalog: its identity and warehouse, its metrics, its routes."""
    app.state.catalog = CatalogSite(settings.catalog_name, Warehouse(settings.warehouse))
    app.state.catalog_metrics = Counter(
        "metaservice_iceberg_metrics_reports",
        "Iceberg metrics reports received by the catalog, by report type.",
        ["kind"], registry=app.state.metrics.registry)
    _install_error_rendering(app)
    app.include_router(router)
    app.include_router(view_router)
