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

from fastapi import APIRouter, BackgroundTasks, Body, FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import Counter
from pydantic import ValidationError
from pyiceberg.catalog.rest import RegisterTableRequest
from pyiceberg.table import CommitTableRequest
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from metaservice.auth.service import ANONYMOUS_ADMIN, Principal
from metaservice.catalog import (
    consistent_warehouses,
    idempotency,
    pages,
    read_sessions,
    service,
    validation,
)
from metaservice.catalog.errors import (
    BadRequestError,
    CommitFailedError,
    ForbiddenError,
    IcebergError,
    RefusedError,
    UnprocessableEntityError,
    iceberg_body,
)
from metaservice.catalog.schemas import ICEBERG_ERROR_RESPONSES, PageSize, PageToken
from metaservice.catalog.service import CatalogSite, LoadedTable
from metaservice.catalog.sql_view_endpoints import ENDPOINTS as SQL_VIEW_ENDPOINTS
from metaservice.catalog.sql_view_endpoints import sql_view_router
from metaservice.catalog.storage import Warehouse
from metaservice.context import ServiceContext
from metaservice.db.session import Database
from metaservice.deps import Context, DatabaseDep, ReadSession, WriteSession
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
        refusal = RefusedError.from_domain(exc)
        return JSONResponse(refusal.to_body(), status_code=refusal.status_code,
                            headers=exc.headers)
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
    *SQL_VIEW_ENDPOINTS,
]


def _site(request: Request) -> CatalogSite:
    return request.app.state.catalog  # type: ignore[no-any-return]


def _context(request: Request) -> ServiceContext:
    return request.app.state.context  # type: ignore[no-any-return]


def _levels(namespace: str) -> list[str]:
    return namespace.split(NAMESPACE_SEPARATOR)


def _principal(request: Request) -> Principal:
    return getattr(request.state, "principal", None) or ANONYMOUS_ADMIN


def _table_response(loaded: LoadedTable | service.NotModified,
                    if_none_match: str | None = None) -> Response:
    """A table answer with its ``ETag``; 304 with no body when ``If-None-Match`` names it."""
    if isinstance(loaded, service.NotModified):
        return Response(status_code=304, headers={"ETag": loaded.etag})
    tag = loaded.etag
    if tag is not None and service.etag_matches(if_none_match, tag):
        return Response(status_code=304, headers={"ETag": tag})
    parts = []
    if loaded.metadata_location is not None:
        parts.append(f'"metadata-location":{json.dumps(loaded.metadata_location)}')
    parts.append(f'"metadata":{loaded.metadata.model_dump_json()}')
    parts.append('"config":{}')
    return Response("{" + ",".join(parts) + "}", media_type="application/json",
                    headers={"ETag": tag} if tag is not None else None)


IfNoneMatch = Annotated[str | None, Header(alias="If-None-Match", max_length=2000)]


JsonObject = Annotated[dict[str, Any], Body()]


def _idempotent(request: Request, database: Database, ctx: ServiceContext, operation: str,
                status: int, run: Callable[[idempotency.Guard | None], Response]) -> Response:
    """Run a mutation under its ``Idempotency-Key`` (if the request has one): a key already
    finished answers its first outcome, whatever this request's body says."""
    one = idempotency.guard(request.headers.get("idempotency-key"), _principal(request).name,
                            operation, now_ms=ctx.clock.now_ms(),
                            lifetime_seconds=ctx.settings.idempotency_key_seconds,
                            status=status)
    if one is None:
        return run(None)
    replayed = _replay(request, database, one)
    if replayed is not None:
        return replayed
    try:
        response = run(one)
    except idempotency.Replay:
        replayed = _replay(request, database, one)
        if replayed is None:  # claimed, then expired in between: nothing to answer with
            raise CommitFailedError("the Idempotency-Key expired while in use; retry with a "
                                    "new key") from None
        return replayed
    except (IcebergError, MetaServiceError) as exc:
        answer = iceberg_error_response(exc)
        if answer.status_code in idempotency.FINAL_ERROR_STATUSES and not (
                answer.status_code == 409 and isinstance(exc, CommitFailedError)):
            with database.transaction(write=True) as session:
                idempotency.record(session, one, answer.status_code,
                                   {"error": json.loads(answer.body)})
        raise
    if not one.claimed:  # nothing was written: the outcome is recorded on its own
        with database.transaction(write=True) as session:
            idempotency.record(session, one, response.status_code, one.outcome)
    return response


def _replay(request: Request, database: Database, one: idempotency.Guard) -> Response | None:
    with database.transaction(write=False) as session:
        found = idempotency.stored(session, one)
    if found is None:
        return None
    if found.operation != one.operation:
        raise UnprocessableEntityError(
            f"Idempotency-Key {one.key} was used for {found.operation}, not {one.operation}: "
            "use a new key for each operation")
    logger.info("catalog_idempotent_replay", extra={"operation": one.operation})
    if "error" in found.outcome:
        return JSONResponse(found.outcome["error"], status_code=found.status)
    location = found.outcome.get("metadata-location")
    if location is None:
        return Response(status_code=found.status)
    metadata = service.read_metadata(_site(request), location)
    return _table_response(LoadedTable(metadata, location))


# -- configuration -----------------------------------------------------------------------------


@router.get("/v1/config", operation_id="iceberg_get_config")
def get_config(request: Request, session: WriteSession, ctx: Context,
               warehouse: Annotated[str | None, Query(max_length=200)] = None) -> dict[str, Any]:
    """The catalog's configuration and the endpoints it serves. A consistent warehouse
    (``lake@strong``, ``lake@barrier=<B>``) opens a read session, named by the ``prefix`` of
    the answer's overrides (SPEC §12)."""
    site = _site(request)
    consistent = consistent_warehouses.parse_warehouse(warehouse, site.name)
    lifetime = idempotency.lifetime(ctx.settings.idempotency_key_seconds)
    if consistent is None:
        return {"defaults": {}, "overrides": {}, "endpoints": ENDPOINTS,
                "idempotency-key-lifetime": lifetime}
    prefix = read_sessions.open_session(session, ctx, site.name, consistent,
                                        _principal(request))
    # Every endpoint is listed, so that a client sends its commit and hears why it is refused.
    return {"defaults": {}, "overrides": {"prefix": prefix}, "endpoints": ENDPOINTS,
            "idempotency-key-lifetime": lifetime}


# -- namespaces --------------------------------------------------------------------------------


@router.get("/v1/namespaces", operation_id="iceberg_list_namespaces")
def list_namespaces(session: ReadSession,
                    parent: Annotated[str | None, Query(max_length=1000)] = None,
                    page_token: PageToken = None, page_size: PageSize = None,
                    ) -> dict[str, Any]:
    """Namespaces in name order; with ``pageToken`` (empty to start) a page at a time."""
    namespaces, token = service.list_namespaces(
        session, _levels(parent) if parent else None, pages.page(page_token, page_size))
    return {"namespaces": namespaces, "next-page-token": token}


@router.post("/v1/namespaces", operation_id="iceberg_create_namespace")
def create_namespace(request: Request, session: WriteSession, ctx: Context,
                     body: JsonObject) -> dict[str, Any]:
    namespace = body.get("namespace")
    properties = body.get("properties") or {}
    if (not isinstance(namespace, list) or not all(isinstance(p, str) for p in namespace)
            or not isinstance(properties, dict)):
        raise BadRequestError("body must be {\"namespace\": [str, …], \"properties\": {…}}")
    levels, props = service.create_namespace(
        session, ctx, _site(request), namespace, {str(k): str(v) for k, v in properties.items()})
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
def update_namespace_properties(request: Request, session: WriteSession, namespace: str,
                                body: JsonObject) -> dict[str, Any]:
    removals = body.get("removals") or []
    updates = body.get("updates") or {}
    if not isinstance(removals, list) or not isinstance(updates, dict):
        raise BadRequestError("body must be {\"removals\": [str, …], \"updates\": {…}}")
    return service.update_namespace_properties(
        session, _site(request), _levels(namespace), [str(r) for r in removals],
        {str(k): str(v) for k, v in updates.items()})


# -- tables ------------------------------------------------------------------------------------


@router.get("/v1/namespaces/{namespace}/tables", operation_id="iceberg_list_tables")
def list_tables(session: ReadSession, namespace: str, page_token: PageToken = None,
                page_size: PageSize = None) -> dict[str, Any]:
    """Tables in name order; with ``pageToken`` (empty to start) a page at a time."""
    levels = _levels(namespace)
    names, token = service.list_tables(session, levels, pages.page(page_token, page_size))
    return {"identifiers": [{"namespace": levels, "name": name} for name in names],
            "next-page-token": token}


@router.post("/v1/namespaces/{namespace}/tables", operation_id="iceberg_create_table")
def create_table(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                 body: JsonObject) -> Response:
    parsed = validation.create_table_request(body)
    return _idempotent(request, database, ctx, "createTable", 200, lambda guard: (
        _table_response(service.create_table(database, ctx, _site(request),
                                             _levels(namespace), parsed, _principal(request),
                                             guard))))


@router.post("/v1/namespaces/{namespace}/register", operation_id="iceberg_register_table")
def register_table(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                   body: JsonObject) -> Response:
    parsed = RegisterTableRequest.model_validate({"overwrite": False, **body})
    return _idempotent(request, database, ctx, "registerTable", 200, lambda guard: (
        _table_response(service.register_table(
            database, ctx, _site(request), _levels(namespace), parsed.name,
            parsed.metadata_location, parsed.overwrite, _principal(request), guard))))


@router.get("/v1/namespaces/{namespace}/tables/{table}", operation_id="iceberg_load_table")
def load_table(request: Request, database: DatabaseDep, namespace: str, table: str,
               snapshots: Annotated[str, Query(pattern="^(all|refs)$")] = "all",
               if_none_match: IfNoneMatch = None) -> Response:
    """The table's metadata with its ``ETag``; 304 when ``If-None-Match`` names it."""
    return _table_response(service.load_table(database, _site(request), _levels(namespace),
                                              table, snapshots, if_none_match))


@router.head("/v1/namespaces/{namespace}/tables/{table}", status_code=204,
             operation_id="iceberg_table_exists")
def table_exists(session: ReadSession, namespace: str, table: str) -> Response:
    service.table_exists(session, _levels(namespace), table)
    return Response(status_code=204)


@router.post("/v1/namespaces/{namespace}/tables/{table}", operation_id="iceberg_commit_table")
def commit_table(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                 table: str, body: JsonObject, background: BackgroundTasks) -> Response:
    """Commit updates to a table; SPEC §11's rules apply in the same transaction."""
    name = service.namespace_name(_levels(namespace))
    parsed = service.parse_commit(body, namespace=name, table=table)

    def run(guard: idempotency.Guard | None) -> Response:
        (staged,) = service.commit_tables(database, ctx, _site(request),
                                          [(name, table, parsed)], _principal(request), guard)
        if guard is not None:
            guard.outcome = {"metadata-location": staged.metadata_location}
        _delete_removed_cut_files(request, background, [staged])
        return _table_response(LoadedTable(staged.metadata, staged.metadata_location))

    return _idempotent(request, database, ctx, "commitTable", 200, run)


@router.delete("/v1/namespaces/{namespace}/tables/{table}", status_code=204,
               operation_id="iceberg_drop_table")
def drop_table(request: Request, database: DatabaseDep, namespace: str, table: str,
               background: BackgroundTasks,
               purge_requested: Annotated[bool, Query(alias="purgeRequested")] = False,
               ) -> Response:
    def run(guard: idempotency.Guard | None) -> Response:
        dropped = service.drop_table(database, _site(request), _levels(namespace), table,
                                     _principal(request), guard)
        if purge_requested:  # after the drop committed (the response is sent after it)
            warehouse = _site(request).warehouse
            background.add_task(warehouse.purge, dropped.metadata_location, dropped.claims)
            background.add_task(warehouse.delete_cut_files, dropped.cut_files)
        return Response(status_code=204)

    return _idempotent(request, database, _context(request), "dropTable", 204, run)


@router.post("/v1/tables/rename", status_code=204, operation_id="iceberg_rename_table")
def rename_table(request: Request, database: DatabaseDep, ctx: Context,
                 body: JsonObject) -> Response:
    try:
        source, destination = body["source"], body["destination"]
        args = (list(source["namespace"]), str(source["name"]),
                list(destination["namespace"]), str(destination["name"]))
    except (KeyError, TypeError) as exc:
        raise BadRequestError("body must be {\"source\": {\"namespace\": […], \"name\": …}, "
                              "\"destination\": {…}}") from exc

    def run(guard: idempotency.Guard | None) -> Response:
        with database.transaction(write=True) as session:
            if guard is not None:
                guard.claim(session)
            service.rename_table(session, ctx, _site(request), _principal(request), *args)
            if guard is not None:
                guard.finish(session, {})
        return Response(status_code=204)

    return _idempotent(request, database, ctx, "renameTable", 204, run)


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
def commit_transaction(request: Request, database: DatabaseDep, ctx: Context,
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
    def run(guard: idempotency.Guard | None) -> Response:
        staged = service.commit_tables(database, ctx, _site(request), requests,
                                       _principal(request), guard)
        _delete_removed_cut_files(request, background, staged)
        return Response(status_code=204)

    return _idempotent(request, database, ctx, "commitTransaction", 204, run)


def _delete_removed_cut_files(request: Request, background: BackgroundTasks,
                              staged: list[service.StagedCommit]) -> None:
    """The cut files of snapshots a commit removed go after it committed (the response, and
    so the background task, comes after the commit)."""
    removed = [location for one in staged for location in one.removed_cut_files]
    if removed:
        background.add_task(_site(request).warehouse.delete_cut_files, removed)


# -- read sessions of consistent warehouses (SPEC §12): the same reads under a session's
# prefix; writes are refused --------------------------------------------------------------------

session_router = APIRouter(prefix=PREFIX + "/v1/{prefix}", tags=["iceberg"],
                           responses=ICEBERG_ERROR_RESPONSES)


def _in_session(session: ReadSession, request: Request, ctx: Context, prefix: str) -> None:
    read_sessions.ensure_live(session, ctx, prefix, _principal(request))


@session_router.get("/namespaces", operation_id="iceberg_session_list_namespaces")
def list_namespaces_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                               parent: Annotated[str | None, Query(max_length=1000)] = None,
                               page_token: PageToken = None, page_size: PageSize = None,
                               ) -> dict[str, Any]:
    _in_session(session, request, ctx, prefix)
    return list_namespaces(session, parent, page_token, page_size)


@session_router.get("/namespaces/{namespace}", operation_id="iceberg_session_load_namespace")
def load_namespace_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                              namespace: str) -> dict[str, Any]:
    _in_session(session, request, ctx, prefix)
    return load_namespace(session, namespace)


@session_router.head("/namespaces/{namespace}", status_code=204,
                     operation_id="iceberg_session_namespace_exists")
def namespace_exists_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                                namespace: str) -> Response:
    _in_session(session, request, ctx, prefix)
    return namespace_exists(session, namespace)


@session_router.get("/namespaces/{namespace}/tables", operation_id="iceberg_session_list_tables")
def list_tables_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                           namespace: str, page_token: PageToken = None,
                           page_size: PageSize = None) -> dict[str, Any]:
    _in_session(session, request, ctx, prefix)
    return list_tables(session, namespace, page_token, page_size)


@session_router.get("/namespaces/{namespace}/tables/{table}",
                    operation_id="iceberg_session_load_table")
def load_table_in_session(request: Request, database: DatabaseDep, ctx: Context, prefix: str,
                          namespace: str, table: str,
                          snapshots: Annotated[str, Query(pattern="^(all|refs)$")] = "all",
                          if_none_match: IfNoneMatch = None) -> Response:
    """The table at the read session's cut: fixed at the first load of its pipeline, leased
    for the session; its ``ETag`` names the cut file."""
    return _table_response(service.load_table_in_session(
        database, ctx, _site(request), prefix, _principal(request), _levels(namespace), table,
        snapshots), if_none_match)


@session_router.head("/namespaces/{namespace}/tables/{table}", status_code=204,
                     operation_id="iceberg_session_table_exists")
def table_exists_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                            namespace: str, table: str) -> Response:
    _in_session(session, request, ctx, prefix)
    return table_exists(session, namespace, table)


@session_router.post("/namespaces/{namespace}/tables/{table}/metrics", status_code=204,
                     operation_id="iceberg_session_report_metrics")
def report_metrics_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                              namespace: str, table: str, body: JsonObject) -> Response:
    _in_session(session, request, ctx, prefix)
    return report_metrics(request, namespace, table, body)


@session_router.post("/{path:path}", status_code=204, operation_id="iceberg_session_post")
@session_router.put("/{path:path}", status_code=204, operation_id="iceberg_session_put")
@session_router.delete("/{path:path}", status_code=204, operation_id="iceberg_session_delete")
def write_in_session(request: Request, session: ReadSession, ctx: Context, prefix: str,
                     path: str) -> Response:
    """Read sessions are read-only: every change goes through the head (warehouse ``lake``)."""
    _in_session(session, request, ctx, prefix)
    raise ForbiddenError("this is a read-only session of a consistent warehouse (SPEC §12): "
                         "commit through the head, warehouse without @…")


def install_catalog(app: FastAPI, settings: Settings) -> None:
    """Mount the catalog: its identity and warehouse, its metrics, its routes."""
    app.state.catalog = CatalogSite(settings.catalog_name, Warehouse(
        settings.warehouse, settings.allowed_locations,
        max_metadata_bytes=settings.max_metadata_bytes,
        read_seconds=settings.metadata_read_seconds))
    app.state.catalog_metrics = Counter(
        "metaservice_iceberg_metrics_reports",
        "Iceberg metrics reports received by the catalog, by report type.",
        ["kind"], registry=app.state.metrics.registry)
    _install_error_rendering(app)
    app.include_router(router)
    app.include_router(sql_view_router)
    app.include_router(session_router)

    def fill_identities() -> None:
        try:
            filled = service.fill_identities(app.state.database, app.state.catalog,
                                             app.state.context.clock.now_ms())
        except SQLAlchemyError as exc:  # not migrated yet: /readyz says so
            logger.warning("catalog_identities_not_filled",
                           extra={"error_class": type(exc).__name__})
            return
        if filled:
            logger.info("catalog_identities_filled", extra={"tables": filled})

    app.router.add_event_handler("startup", fill_identities)
