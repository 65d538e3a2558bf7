"""Which role each route needs (pure code).

Roles are ordered: ``reader`` < ``writer`` < ``admin``. Reads, versions and leases need a reader;
the barrier protocol and root reports a writer; tokens, expirations and rollbacks an admin.
The Iceberg catalog's reads need a reader, its commits a writer, its drops an admin.
Probes, metrics, the API documents, the dashboard page and the schema of the OpenLineage
run facet are public. A route that is not in
:data:`ROUTE_ROLES` needs ``admin`` if it changes anything and ``reader`` otherwise, so a new
mutating route is never left open by accident.
"""

from __future__ import annotations

import re
from enum import IntEnum


class Role(IntEnum):
    reader = 1
    writer = 2
    admin = 3


PUBLIC = "public"

# (method, route template) → role, or PUBLIC.
ROUTE_ROLES: dict[tuple[str, str], Role | str] = {
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/metrics"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/docs/oauth2-redirect"): PUBLIC,
    ("GET", "/redoc"): PUBLIC,
    ("GET", "/ui"): PUBLIC,
    ("GET", "/ui/{path:path}"): PUBLIC,
    # The JSON schema of MetaService's OpenLineage run facet, named in every event it sends.
    ("GET", "/openlineage/facets/1-0-0/MetaServiceBarrierRunFacet.json"): PUBLIC,
    # Token administration reads need an admin too.
    ("GET", "/admin/tokens"): Role.admin,
    # Readers: versions and leases change nothing but usage records.
    ("POST", "/versions"): Role.reader,
    ("POST", "/leases"): Role.reader,
    ("POST", "/leases/{lease_id}/renew"): Role.reader,
    ("DELETE", "/leases/{lease_id}"): Role.reader,
    # Writers: the job protocol and root ingestion.
    ("POST", "/register/source/{job}/{catalog}/{database}/{table}"): Role.writer,
    ("POST", "/register/sink/{job}/{catalog}/{database}/{table}"): Role.writer,
    ("POST", "/jobs/{job}/start"): Role.writer,
    ("POST", "/jobs/{job}/barriers/next"): Role.writer,
    ("POST", "/jobs/{job}/barriers/{barrier}/abort"): Role.writer,
    ("POST", "/commit/{job}/{catalog}/{database}/{table}"): Role.writer,
    ("POST", "/unregister/{job}"): Role.writer,
    ("POST", "/tables/{catalog}/{database}/{table}/barriers"): Role.writer,
    # The Iceberg catalog (docs/contract.md#trust): reads a reader, commits a writer, drops an
    # admin.
    ("GET", "/iceberg/v1/config"): Role.reader,
    ("GET", "/iceberg/v1/namespaces"): Role.reader,
    ("GET", "/iceberg/v1/namespaces/{namespace}"): Role.reader,
    ("GET", "/iceberg/v1/namespaces/{namespace}/tables"): Role.reader,
    ("GET", "/iceberg/v1/namespaces/{namespace}/tables/{table}"): Role.reader,
    ("GET", "/iceberg/v1/namespaces/{namespace}/tables/{table}/credentials"): Role.reader,
    ("POST", "/iceberg/v1/aws/s3/sign"): Role.reader,
    ("POST", "/iceberg/v1/namespaces/{namespace}/tables/{table}/metrics"): Role.reader,
    ("POST", "/iceberg/v1/namespaces"): Role.writer,
    ("POST", "/iceberg/v1/namespaces/{namespace}/properties"): Role.writer,
    ("POST", "/iceberg/v1/namespaces/{namespace}/tables"): Role.writer,
    ("POST", "/iceberg/v1/namespaces/{namespace}/register"): Role.writer,
    ("POST", "/iceberg/v1/namespaces/{namespace}/tables/{table}"): Role.writer,
    ("POST", "/iceberg/v1/tables/rename"): Role.writer,
    ("POST", "/iceberg/v1/transactions/commit"): Role.writer,
    ("DELETE", "/iceberg/v1/namespaces/{namespace}"): Role.admin,
    ("DELETE", "/iceberg/v1/namespaces/{namespace}/tables/{table}"): Role.admin,
    ("POST", "/iceberg/v1/namespaces/{namespace}/tables/{table}/unregister"): Role.admin,
    # Scan planning is a load's read (docs/contract.md#scan-planning): a reader plans, fetches
    # and cancels its own plans.
    ("POST", "/iceberg/v1/namespaces/{namespace}/tables/{table}/plan"): Role.reader,
    ("GET", "/iceberg/v1/namespaces/{namespace}/tables/{table}/plan/{plan_id}"): Role.reader,
    ("DELETE", "/iceberg/v1/namespaces/{namespace}/tables/{table}/plan/{plan_id}"): Role.reader,
    ("POST", "/iceberg/v1/namespaces/{namespace}/tables/{table}/tasks"): Role.reader,
    ("POST", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}/plan"): Role.reader,
    ("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan_id}"):
        Role.reader,
    ("DELETE", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan_id}"):
        Role.reader,
    ("POST", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}/tasks"): Role.reader,
    ("GET", "/iceberg/v1/namespaces/{namespace}/functions"): Role.reader,
    ("GET", "/iceberg/v1/namespaces/{namespace}/functions/{function}"): Role.reader,
    # Read sessions of its consistent warehouses (docs/contract.md#read-sessions) are read-only: a
    # reader reads them, and a write is refused (403) whoever asks.
    ("GET", "/iceberg/v1/{prefix}/namespaces"): Role.reader,
    ("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}"): Role.reader,
    ("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables"): Role.reader,
    ("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}"): Role.reader,
    ("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials"):
        Role.reader,
    ("POST", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics"): Role.reader,
    ("POST", "/iceberg/v1/{prefix}/{path:path}"): Role.reader,
    ("PUT", "/iceberg/v1/{prefix}/{path:path}"): Role.reader,
    ("DELETE", "/iceberg/v1/{prefix}/{path:path}"): Role.reader,
    # Its Iceberg views (the SQL objects): as its tables, reads a reader, changes a writer, drops
    # an admin; under a read session's prefix, reads only.
    ("GET", "/iceberg/v1/namespaces/{namespace}/views"): Role.reader,
    ("GET", "/iceberg/v1/namespaces/{namespace}/views/{view}"): Role.reader,
    ("POST", "/iceberg/v1/namespaces/{namespace}/views"): Role.writer,
    ("POST", "/iceberg/v1/namespaces/{namespace}/views/{view}"): Role.writer,
    ("POST", "/iceberg/v1/namespaces/{namespace}/register-view"): Role.writer,
    ("POST", "/iceberg/v1/views/rename"): Role.writer,
    ("DELETE", "/iceberg/v1/namespaces/{namespace}/views/{view}"): Role.admin,
    ("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}/views"): Role.reader,
    ("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}/views/{view}"): Role.reader,
}

_PARAM = re.compile(r"\{[^}]*\}")


def _shape(path: str) -> str:
    """A route template with its parameter names erased: ``/leases/{}/renew``."""
    return _PARAM.sub("{}", path)


_ROLES_BY_SHAPE = {(method, _shape(path)): role for (method, path), role in ROUTE_ROLES.items()}


def required_role(method: str, path: str) -> Role | str:
    """The role a request to ``path`` (a route template) with ``method`` needs."""
    method = "GET" if method == "HEAD" else method
    role = _ROLES_BY_SHAPE.get((method, _shape(path)))
    if role is not None:
        return role
    if path.startswith("/ui/") and method == "GET":
        return PUBLIC
    return Role.reader if method == "GET" else Role.admin
