"""The Iceberg REST routes of the catalog's Iceberg views (HTTP only), mounted under
``/iceberg``: list, create, load, replace (commit), rename, drop, exists and register, as the
Iceberg REST catalog OpenAPI specification gives them (``sql_view_service`` has the rules).

Under a read session's prefix (``/iceberg/v1/session-<id>/…``, SPEC §12) a view is listed, loaded
and probed as at the head: its SQL then reads the session's tables at the session's cut; every
change there is refused as any other (``endpoints.write_in_session``).

``sql_view_router`` is included before the read sessions' routes, whose catch-all would
otherwise take ``POST /iceberg/v1/views/rename``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from pyiceberg.catalog.rest import CreateViewRequest, RegisterViewRequest, ViewResponse

from metaservice.auth.service import ANONYMOUS_ADMIN, Principal
from metaservice.catalog import pages, read_sessions
from metaservice.catalog import sql_view_service as service
from metaservice.catalog.errors import BadRequestError
from metaservice.catalog.schemas import ICEBERG_ERROR_RESPONSES, PageSize, PageToken
from metaservice.catalog.service import CatalogSite
from metaservice.deps import Context, DatabaseDep, ReadSession, WriteSession

PREFIX = "/iceberg"
NAMESPACE_SEPARATOR = "\x1f"

# The view endpoints of the specification this catalog serves, as ``config`` lists them.
ENDPOINTS = [
    "GET /v1/{prefix}/namespaces/{namespace}/views",
    "POST /v1/{prefix}/namespaces/{namespace}/views",
    "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/namespaces/{namespace}/register-view",
    "POST /v1/{prefix}/views/rename",
]

sql_view_router = APIRouter(prefix=PREFIX, tags=["iceberg"], responses=ICEBERG_ERROR_RESPONSES)

JsonObject = Annotated[dict[str, Any], Body()]


def _site(request: Request) -> CatalogSite:
    return request.app.state.catalog  # type: ignore[no-any-return]


def _levels(namespace: str) -> list[str]:
    return namespace.split(NAMESPACE_SEPARATOR)


def _principal(request: Request) -> Principal:
    return getattr(request.state, "principal", None) or ANONYMOUS_ADMIN


def _view_response(loaded: service.LoadedView) -> Response:
    answer = ViewResponse.model_validate({"metadata-location": loaded.metadata_location,
                                          "metadata": loaded.metadata, "config": {}})
    return Response(answer.model_dump_json(), media_type="application/json")


@sql_view_router.get("/v1/namespaces/{namespace}/views", operation_id="iceberg_list_views")
def list_views(session: ReadSession, namespace: str, page_token: PageToken = None,
               page_size: PageSize = None) -> dict[str, Any]:
    """Views in name order; with ``pageToken`` (empty to start) a page at a time."""
    levels = _levels(namespace)
    names, token = service.list_views(session, levels, pages.page(page_token, page_size))
    return {"identifiers": [{"namespace": levels, "name": name} for name in names],
            "next-page-token": token}


@sql_view_router.post("/v1/namespaces/{namespace}/views", operation_id="iceberg_create_view")
def create_view(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                body: JsonObject) -> Response:
    parsed = CreateViewRequest.model_validate({"location": None, **body})
    return _view_response(service.create_view(database, ctx, _site(request), _levels(namespace),
                                              parsed))


@sql_view_router.post("/v1/namespaces/{namespace}/register-view",
                      operation_id="iceberg_register_view")
def register_view(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                  body: JsonObject) -> Response:
    parsed = RegisterViewRequest.model_validate(body)
    return _view_response(service.register_view(database, ctx, _site(request),
                                                _levels(namespace), parsed.name,
                                                parsed.metadata_location))


@sql_view_router.get("/v1/namespaces/{namespace}/views/{view}",
                     operation_id="iceberg_load_view")
def load_view(request: Request, database: DatabaseDep, namespace: str, view: str) -> Response:
    return _view_response(service.load_view(database, _site(request), _levels(namespace), view))


@sql_view_router.head("/v1/namespaces/{namespace}/views/{view}", status_code=204,
                      operation_id="iceberg_view_exists")
def view_exists(session: ReadSession, namespace: str, view: str) -> Response:
    service.view_exists(session, _levels(namespace), view)
    return Response(status_code=204)


@sql_view_router.post("/v1/namespaces/{namespace}/views/{view}",
                      operation_id="iceberg_replace_view")
def replace_view(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                 view: str, body: JsonObject) -> Response:
    """Commit updates to a view, once its requirements hold."""
    return _view_response(service.commit_view(database, ctx, _site(request), _levels(namespace),
                                              view, service.parse_commit(body)))


@sql_view_router.delete("/v1/namespaces/{namespace}/views/{view}", status_code=204,
                        operation_id="iceberg_drop_view")
def drop_view(session: WriteSession, namespace: str, view: str) -> Response:
    service.drop_view(session, _levels(namespace), view)
    return Response(status_code=204)


@sql_view_router.post("/v1/views/rename", status_code=204, operation_id="iceberg_rename_view")
def rename_view(request: Request, session: WriteSession, ctx: Context,
                body: JsonObject) -> Response:
    try:
        source, destination = body["source"], body["destination"]
        args = (list(source["namespace"]), str(source["name"]),
                list(destination["namespace"]), str(destination["name"]))
    except (KeyError, TypeError) as exc:
        raise BadRequestError("body must be {\"source\": {\"namespace\": […], \"name\": …}, "
                              "\"destination\": {…}}") from exc
    if not all(isinstance(level, str) for level in (*args[0], *args[2])):
        raise BadRequestError("a namespace is a list of strings")
    service.rename_view(session, ctx, _site(request), *args)
    return Response(status_code=204)


# -- under a read session's prefix (SPEC §12): reads only ---------------------------------------


def _in_session(database: DatabaseDep, request: Request, ctx: Context, prefix: str) -> None:
    with database.transaction(write=False) as session:
        read_sessions.ensure_live(session, ctx, prefix, _principal(request))


@sql_view_router.get("/v1/{prefix}/namespaces/{namespace}/views",
                     operation_id="iceberg_session_list_views")
def list_views_in_session(request: Request, database: DatabaseDep, ctx: Context, prefix: str,
                          namespace: str, page_token: PageToken = None,
                          page_size: PageSize = None) -> dict[str, Any]:
    _in_session(database, request, ctx, prefix)
    with database.transaction(write=False) as session:
        return list_views(session, namespace, page_token, page_size)


@sql_view_router.get("/v1/{prefix}/namespaces/{namespace}/views/{view}",
                     operation_id="iceberg_session_load_view")
def load_view_in_session(request: Request, database: DatabaseDep, ctx: Context, prefix: str,
                         namespace: str, view: str) -> Response:
    _in_session(database, request, ctx, prefix)
    return load_view(request, database, namespace, view)


@sql_view_router.head("/v1/{prefix}/namespaces/{namespace}/views/{view}", status_code=204,
                      operation_id="iceberg_session_view_exists")
def view_exists_in_session(request: Request, database: DatabaseDep, ctx: Context, prefix: str,
                           namespace: str, view: str) -> Response:
    _in_session(database, request, ctx, prefix)
    with database.transaction(write=False) as session:
        return view_exists(session, namespace, view)
