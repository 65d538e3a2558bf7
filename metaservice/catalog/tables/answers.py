"""The catalog's table answers (HTTP only): a table's metadata with its ``ETag`` (and vended
credentials), and the head's answers to the table reads that a read session's routes give as
well (list, exists, metrics reports, credentials), shared by ``endpoints.py`` and
``read_sessions/endpoints.py``."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Query, Request, Response
from sqlalchemy.orm import Session

from metaservice.catalog import pages
from metaservice.catalog.deps import levels, principal, site
from metaservice.catalog.requests import ReportMetricsRequest
from metaservice.catalog.storage.credentials import CredentialsUnavailableError
from metaservice.catalog.tables import delegation
from metaservice.catalog.tables import service as tables
from metaservice.catalog.tables.delegation import StorageAccess, wants_vended_credentials
from metaservice.catalog.tables.service import LoadedTable, NotModified, etag_matches
from metaservice.db.session import Database

Snapshots = Annotated[str, Query(pattern="^(all|refs)$")]


def table_response(loaded: LoadedTable | NotModified,
                   if_none_match: str | None = None,
                   access: StorageAccess | None = None) -> Response:
    """A table answer with its ``ETag``; 304 with no body when ``If-None-Match`` names it. The
    metadata's JSON comes serialised (``LoadedTable.metadata_json``): the body is put together
    from bytes. ``access``: vended credentials, in ``config`` and ``storage-credentials``."""
    if isinstance(loaded, NotModified):
        return Response(status_code=304, headers={"ETag": loaded.etag})
    tag = loaded.etag
    if tag is not None and etag_matches(if_none_match, tag):
        return Response(status_code=304, headers={"ETag": tag})
    parts = [b"{"]
    if loaded.metadata_location is not None:
        parts += [b'"metadata-location":', json.dumps(loaded.metadata_location).encode(), b","]
    parts += [b'"metadata":', loaded.metadata_json]
    if access is None or not access.config:
        parts.append(b',"config":{}}')
    else:
        parts += [b',"config":', json.dumps(access.config).encode()]
        if access.storage_credentials:
            parts += [b',"storage-credentials":', json.dumps(access.storage_credentials).encode()]
        parts.append(b"}")
    return Response(b"".join(parts), media_type="application/json",
                    headers={"ETag": tag} if tag is not None else None)


def vended_access(request: Request, database: Database, namespace: str, table: str,
                  loaded: LoadedTable | NotModified, access_delegation: str | None,
                  session_prefix: str | None = None) -> StorageAccess | None:
    """The credentials a table answer carries: when asked for, and STS gives them (when it
    does not, the answer goes without, logged; ``…/credentials`` answers 503)."""
    if (not wants_vended_credentials(access_delegation) or not isinstance(loaded, LoadedTable)
            or loaded.metadata_location is None):
        return None
    try:
        return delegation.storage_access(database, site(request), principal(request),
                                         levels(namespace), table, loaded.metadata_location,
                                         session_prefix)
    except CredentialsUnavailableError:
        return None


def load_credentials(request: Request, database: Database, namespace: str, table: str,
                     session_prefix: str | None = None) -> dict[str, Any]:
    """``…/credentials``: fresh credentials for the table's files (none when the catalog vends
    none); 503 when STS fails."""
    access = delegation.storage_access(database, site(request), principal(request),
                                       levels(namespace), table, session_prefix=session_prefix)
    return {"storage-credentials": access.storage_credentials}


def list_tables(session: Session, namespace: str, page_token: str | None = None,
                page_size: int | None = None) -> dict[str, Any]:
    """Tables in name order; with ``pageToken`` (empty to start) a page at a time."""
    names, token = tables.list_tables(session, levels(namespace),
                                      pages.page(page_token, page_size))
    return {"identifiers": [{"namespace": levels(namespace), "name": name} for name in names],
            "next-page-token": token}


def table_exists(session: Session, namespace: str, table: str) -> Response:
    tables.table_exists(session, levels(namespace), table)
    return Response(status_code=204)


def report_metrics(request: Request, namespace: str, table: str,
                   body: ReportMetricsRequest) -> Response:
    """Metrics reports are counted by kind and otherwise dropped; never an error."""
    kind = str(body.report_type if body.report_type is not None else "unknown")[:40]
    request.app.state.catalog_metrics.labels(
        kind if kind in ("scan-report", "commit-report") else "other").inc()
    return Response(status_code=204)
