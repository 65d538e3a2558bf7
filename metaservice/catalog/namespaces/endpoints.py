"""The catalog's configuration and namespace routes (HTTP only), under ``/iceberg``, and a
namespace's functions (the catalog holds none: an empty list, a 404 for each name)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from metaservice.catalog import idempotency
from metaservice.catalog.config import ENDPOINTS
from metaservice.catalog.deps import PREFIX, levels, principal, site
from metaservice.catalog.namespaces import answers
from metaservice.catalog.namespaces import service as namespaces
from metaservice.catalog.read_sessions import consistent_warehouses
from metaservice.catalog.read_sessions import service as read_sessions
from metaservice.catalog.requests import CreateNamespaceRequest, UpdateNamespacePropertiesRequest
from metaservice.catalog.schemas import ICEBERG_ERROR_RESPONSES, PageSize, PageToken
from metaservice.deps import Context, ReadSession, WriteSession

SEPARATOR_IN_URLS = "%1F"
"""How a namespace's levels are joined in a URL (the specification's default, percent-encoded,
as clients read the ``namespace-separator`` property); it is an override: a level may hold any
other character, a dot included, so the server reads no other separator."""

router = APIRouter(prefix=PREFIX, tags=["iceberg"], responses=ICEBERG_ERROR_RESPONSES)


@router.get("/v1/config", operation_id="iceberg_get_config")
def get_config(request: Request, session: WriteSession, ctx: Context,
               warehouse: Annotated[str | None, Query(max_length=200)] = None) -> dict[str, Any]:
    """The catalog's configuration and the endpoints it serves. A consistent warehouse
    (``lake@strong``, ``lake@barrier=<B>``) opens a read session, named by the ``prefix`` of
    the answer's overrides (docs/contract.md#read-sessions)."""
    catalog = site(request)
    consistent = consistent_warehouses.parse_warehouse(warehouse, catalog.name)
    lifetime = idempotency.lifetime(ctx.settings.idempotency_key_seconds)
    if consistent is None:
        return {"defaults": {}, "overrides": {"namespace-separator": SEPARATOR_IN_URLS},
                "endpoints": ENDPOINTS,
                "idempotency-key-lifetime": lifetime}
    prefix = read_sessions.open_session(session, ctx, catalog.name, consistent,
                                        principal(request))
    # Every endpoint is listed, so that a client sends its commit and hears why it is refused.
    return {"defaults": {}, "overrides": {"prefix": prefix,
                                          "namespace-separator": SEPARATOR_IN_URLS},
            "endpoints": ENDPOINTS,
            "idempotency-key-lifetime": lifetime}


@router.get("/v1/namespaces", operation_id="iceberg_list_namespaces")
def list_namespaces(session: ReadSession,
                    parent: Annotated[str | None, Query(max_length=1000)] = None,
                    page_token: PageToken = None, page_size: PageSize = None,
                    ) -> dict[str, Any]:
    """Namespaces in name order; with ``pageToken`` (empty to start) a page at a time."""
    return answers.list_namespaces(session, parent, page_token, page_size)


@router.post("/v1/namespaces", operation_id="iceberg_create_namespace")
def create_namespace(request: Request, session: WriteSession, ctx: Context,
                     body: CreateNamespaceRequest) -> dict[str, Any]:
    created, properties = namespaces.create_namespace(
        session, ctx, site(request), body.namespace, dict(body.properties or {}))
    return {"namespace": created, "properties": properties}


@router.get("/v1/namespaces/{namespace}", operation_id="iceberg_load_namespace")
def load_namespace(session: ReadSession, namespace: str) -> dict[str, Any]:
    return answers.load_namespace(session, namespace)


@router.head("/v1/namespaces/{namespace}", status_code=204,
             operation_id="iceberg_namespace_exists")
def namespace_exists(session: ReadSession, namespace: str) -> Response:
    return answers.namespace_exists(session, namespace)


@router.delete("/v1/namespaces/{namespace}", status_code=204,
               operation_id="iceberg_drop_namespace")
def drop_namespace(session: WriteSession, namespace: str) -> Response:
    namespaces.drop_namespace(session, levels(namespace))
    return Response(status_code=204)


@router.post("/v1/namespaces/{namespace}/properties",
             operation_id="iceberg_update_namespace_properties")
def update_namespace_properties(request: Request, session: WriteSession, namespace: str,
                                body: UpdateNamespacePropertiesRequest) -> dict[str, Any]:
    return namespaces.update_namespace_properties(
        session, site(request), levels(namespace), list(body.removals or []),
        dict(body.updates or {}))



@router.get("/v1/namespaces/{namespace}/functions", operation_id="iceberg_list_functions")
def list_functions(session: ReadSession, namespace: str, page_token: PageToken = None,
                   page_size: PageSize = None) -> dict[str, Any]:
    """The namespace's functions: none (the catalog holds no function); 404 for a namespace
    that does not exist."""
    return answers.list_functions(session, namespace, page_token, page_size)


@router.get("/v1/namespaces/{namespace}/functions/{function}",
            operation_id="iceberg_load_function")
def load_function(session: ReadSession, namespace: str, function: str) -> dict[str, Any]:
    """404 ``NoSuchFunctionException`` (the catalog holds no function), or
    ``NoSuchNamespaceException`` for a namespace that does not exist."""
    return answers.load_function(session, namespace, function)
