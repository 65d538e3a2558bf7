"""The Iceberg REST routes of the catalog's Iceberg views (HTTP only), mounted under
``/iceberg``: list, create, load, replace (commit), rename, drop, exists and register, as the
Iceberg REST catalog OpenAPI specification gives them (``service.py`` has the rules). A view
answer carries its ``ETag`` (a load whose ``If-None-Match`` names it is a 304), and its
mutations take an ``Idempotency-Key`` as a table's do (``tables/idempotent.py``).

Under a read session's prefix (``/iceberg/v1/session-<id>/…``, docs/contract.md#read-sessions) a
view is listed, loaded and probed as at the head: its SQL then reads the session's tables at the
session's cut; every change there is refused as any other
(``read_sessions/endpoints.write_in_session``).

The read session routes are included before this ``router``; their catch-all (the refusal
of writes) matches only a session's prefix, so it takes no route of the head, and a session's
view routes here are tried before that catch-all only for the methods they have.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from pyiceberg.catalog.rest import ViewResponse

from metaservice.catalog import idempotency, pages
from metaservice.catalog.deps import PREFIX, IfNoneMatch, context, levels, principal, site
from metaservice.catalog.read_sessions import service as read_sessions
from metaservice.catalog.requests import (
    CommitViewRequest,
    CreateViewRequest,
    RegisterViewRequest,
    RenameTableRequest,
)
from metaservice.catalog.schemas import ICEBERG_ERROR_RESPONSES, PageSize, PageToken
from metaservice.catalog.tables.idempotent import idempotent
from metaservice.catalog.tables.service import NotModified
from metaservice.catalog.views import service
from metaservice.deps import Context, DatabaseDep, ReadSession

router = APIRouter(prefix=PREFIX, tags=["iceberg"], responses=ICEBERG_ERROR_RESPONSES)


def _view_response(loaded: service.LoadedView | NotModified) -> Response:
    """A view answer with its ``ETag``; a 304 with no body for a ``NotModified``."""
    if isinstance(loaded, NotModified):
        return Response(status_code=304, headers={"ETag": loaded.etag})
    answer = ViewResponse.model_validate({"metadata-location": loaded.metadata_location,
                                          "metadata": loaded.metadata, "config": {}})
    return Response(answer.model_dump_json(), media_type="application/json",
                    headers={"ETag": loaded.etag})


def _replayed(request: Request) -> Callable[[str], Response]:
    """The answer of a view's metadata file an ``Idempotency-Key``'s outcome names."""
    return lambda location: _view_response(service.loaded(site(request), location))


@router.get("/v1/namespaces/{namespace}/views", operation_id="iceberg_list_views")
def list_views(session: ReadSession, namespace: str, page_token: PageToken = None,
               page_size: PageSize = None) -> dict[str, Any]:
    """Views in name order; with ``pageToken`` (empty to start) a page at a time."""
    names, token = service.list_views(session, levels(namespace),
                                      pages.page(page_token, page_size))
    return {"identifiers": [{"namespace": levels(namespace), "name": name} for name in names],
            "next-page-token": token}


@router.post("/v1/namespaces/{namespace}/views", operation_id="iceberg_create_view")
def create_view(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                body: CreateViewRequest) -> Response:
    def run(guard: idempotency.Guard | None) -> Response:
        return _view_response(service.create_view(database, ctx, site(request),
                                                  levels(namespace), body, guard))

    return idempotent(request, database, ctx, "createView", 200, run, body,
                      load=_replayed(request))


@router.post("/v1/namespaces/{namespace}/register-view",
                      operation_id="iceberg_register_view")
def register_view(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                  body: RegisterViewRequest) -> Response:
    def run(guard: idempotency.Guard | None) -> Response:
        return _view_response(service.register_view(database, ctx, site(request),
                                                    levels(namespace), body.name,
                                                    body.metadata_location, guard))

    return idempotent(request, database, ctx, "registerView", 200, run, body,
                      load=_replayed(request))


@router.get("/v1/namespaces/{namespace}/views/{view}",
                     operation_id="iceberg_load_view")
def load_view(request: Request, database: DatabaseDep, namespace: str, view: str,
              if_none_match: IfNoneMatch = None) -> Response:
    """The view's metadata with its ``ETag``; 304 when ``If-None-Match`` names it."""
    return _view_response(service.load_view(database, site(request), levels(namespace), view,
                                            if_none_match))


@router.head("/v1/namespaces/{namespace}/views/{view}", status_code=204,
                      operation_id="iceberg_view_exists")
def view_exists(session: ReadSession, namespace: str, view: str) -> Response:
    service.view_exists(session, levels(namespace), view)
    return Response(status_code=204)


@router.post("/v1/namespaces/{namespace}/views/{view}",
                      operation_id="iceberg_replace_view")
def replace_view(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                 view: str, body: CommitViewRequest) -> Response:
    """Commit updates to a view, once its requirements hold."""
    def run(guard: idempotency.Guard | None) -> Response:
        return _view_response(service.commit_view(database, ctx, site(request),
                                                  levels(namespace), view, body, guard))

    return idempotent(request, database, ctx, "replaceView", 200, run, body,
                      load=_replayed(request))


@router.delete("/v1/namespaces/{namespace}/views/{view}", status_code=204,
                        operation_id="iceberg_drop_view")
def drop_view(request: Request, database: DatabaseDep, namespace: str, view: str) -> Response:
    def run(guard: idempotency.Guard | None) -> Response:
        with database.transaction(write=True) as session:
            service.drop_view(session, levels(namespace), view, guard)
        return Response(status_code=204)

    return idempotent(request, database, context(request), "dropView", 204, run)


@router.post("/v1/views/rename", status_code=204, operation_id="iceberg_rename_view")
def rename_view(request: Request, database: DatabaseDep, ctx: Context,
                body: RenameTableRequest) -> Response:
    source, destination = body.source, body.destination

    def run(guard: idempotency.Guard | None) -> Response:
        with database.transaction(write=True) as session:
            service.rename_view(session, ctx, site(request), source.namespace, source.name,
                                destination.namespace, destination.name, guard)
        return Response(status_code=204)

    return idempotent(request, database, ctx, "renameView", 204, run, body)


# -- under a read session's prefix (docs/contract.md#read-sessions): reads only --------------------


def _in_session(database: DatabaseDep, request: Request, ctx: Context, prefix: str) -> None:
    with database.transaction(write=False) as session:
        read_sessions.ensure_live(session, ctx, prefix, principal(request))


@router.get("/v1/{prefix}/namespaces/{namespace}/views",
                     operation_id="iceberg_session_list_views")
def list_views_in_session(request: Request, database: DatabaseDep, ctx: Context, prefix: str,
                          namespace: str, page_token: PageToken = None,
                          page_size: PageSize = None) -> dict[str, Any]:
    _in_session(database, request, ctx, prefix)
    with database.transaction(write=False) as session:
        return list_views(session, namespace, page_token, page_size)


@router.get("/v1/{prefix}/namespaces/{namespace}/views/{view}",
                     operation_id="iceberg_session_load_view")
def load_view_in_session(request: Request, database: DatabaseDep, ctx: Context, prefix: str,
                         namespace: str, view: str,
                         if_none_match: IfNoneMatch = None) -> Response:
    _in_session(database, request, ctx, prefix)
    return load_view(request, database, namespace, view, if_none_match)


@router.head("/v1/{prefix}/namespaces/{namespace}/views/{view}", status_code=204,
                      operation_id="iceberg_session_view_exists")
def view_exists_in_session(request: Request, database: DatabaseDep, ctx: Context, prefix: str,
                           namespace: str, view: str) -> Response:
    _in_session(database, request, ctx, prefix)
    with database.transaction(write=False) as session:
        return view_exists(session, namespace, view)
