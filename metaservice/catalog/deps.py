"""What a catalog route reads of its request (HTTP only): the catalog's path prefix, the app's
catalog site, service context and purge worker, the caller, a namespace's levels, the
``If-None-Match`` and ``X-Iceberg-Access-Delegation`` headers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Request

from metaservice.auth.service import ANONYMOUS_ADMIN, Principal
from metaservice.catalog.site import CatalogSite
from metaservice.catalog.tables.purges import PurgeWorker
from metaservice.context import ServiceContext
from metaservice.names import NAMESPACE_SEPARATOR

PREFIX = "/iceberg"


def site(request: Request) -> CatalogSite:
    return request.app.state.catalog  # type: ignore[no-any-return]


def context(request: Request) -> ServiceContext:
    return request.app.state.context  # type: ignore[no-any-return]


def purges(request: Request) -> PurgeWorker:
    """The process's purges of dropped tables (``tables/purges.py``)."""
    return request.app.state.catalog_purges  # type: ignore[no-any-return]


def levels(namespace: str) -> list[str]:
    return namespace.split(NAMESPACE_SEPARATOR)


def principal(request: Request) -> Principal:
    return getattr(request.state, "principal", None) or ANONYMOUS_ADMIN


IfNoneMatch = Annotated[str | None, Header(alias="If-None-Match", max_length=2000)]
AccessDelegation = Annotated[str | None, Header(alias="X-Iceberg-Access-Delegation",
                                                max_length=200)]
