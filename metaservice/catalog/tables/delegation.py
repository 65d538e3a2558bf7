"""Access delegation (docs/operations.md#vended-credentials): what a client that sends
``X-Iceberg-Access-Delegation: vended-credentials`` is given to reach a table's files, in a
table answer's ``config`` and ``storage-credentials`` and at ``…/tables/{table}/credentials``.

The credentials cover the locations the table's current metadata claims (its location and its
``write.*.path`` properties), and write only for a principal that may write the table: a writer
or an admin, and of a table a running job writes, only that job's token or an admin
(``owners.acts_for_job``). A reader's are read-only. Nothing is vended for a warehouse that is
not on an object store or when no vendor is configured; never the server's own keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from metaservice.auth.policy import Role
from metaservice.auth.service import Principal
from metaservice.catalog.errors import ForbiddenError, RefusedError
from metaservice.catalog.site import CatalogSite, existing_table_namespace, table_name
from metaservice.catalog.storage.credentials import (
    READ_METHODS,
    REFRESH_CREDENTIALS_ENDPOINT,
    WRITE_METHODS,
    CredentialsUnavailableError,
    UnsignableRequestError,
)
from metaservice.catalog.storage.object_store import is_object_store
from metaservice.catalog.tables import repository as repo
from metaservice.catalog.tables import service as tables
from metaservice.catalog.tables.owners import acts_for_job
from metaservice.db.session import Database
from metaservice.names import TableName
from metaservice.repositories import tables as tables_repo

VENDED_CREDENTIALS = "vended-credentials"


def wants_vended_credentials(header: str | None) -> bool:
    """Whether ``X-Iceberg-Access-Delegation`` (a comma-separated list) asks for
    vended credentials."""
    return header is not None and VENDED_CREDENTIALS in (
        part.strip().lower() for part in header.split(","))


@dataclass(frozen=True)
class StorageAccess:
    """A table answer's ``config`` additions and its ``storage-credentials`` (empty when none
    are vended)."""

    config: dict[str, str] = field(default_factory=dict, repr=False)
    storage_credentials: list[dict[str, Any]] = field(default_factory=list, repr=False)


def may_write(session: Session, principal: Principal, name: TableName) -> bool:
    """Whether ``principal``'s commits to the table could be accepted: a writer's or an
    admin's, and of a table a running job writes, its token's or an admin's."""
    if not principal.may(Role.writer):
        return False
    row = tables_repo.find_table(session, name)
    return row is None or row.writer_job is None or acts_for_job(session, principal,
                                                                 row.writer_job)


def storage_access(database: Database, catalog: CatalogSite, principal: Principal,
                   levels: Sequence[str], table: str,
                   metadata_location: str | None = None,
                   session_prefix: str | None = None) -> StorageAccess:
    """Credentials for the table's files, for ``principal``: read-write when it may write the
    table, else read-only (``metadata_location``: the metadata the answer gives, else the
    table's current). Under a read session (``session_prefix``) always read-only: its routes
    refuse every write.

    Raises:
        NoSuchTableError: no such table.
        CredentialsUnavailableError: STS failed or refused.
    """
    namespace = existing_table_namespace(levels, table)
    name = table_name(catalog, namespace, table)
    with database.transaction(write=False) as session:
        location = metadata_location or tables.current_metadata_location(session, namespace,
                                                                         table)
        write = session_prefix is None and may_write(session, principal, name)
    keys = [key for key in catalog.warehouse.confine_table(tables.read_metadata(catalog,
                                                                                location))
            if is_object_store(key)]
    vendor = catalog.credentials
    if not keys or (vendor is None and catalog.signer is None):
        return StorageAccess()
    if vendor is None:
        return _signing(catalog)
    try:
        credentials = vendor.vend(keys, write=write, caller=principal.name)
    except CredentialsUnavailableError:
        if catalog.signer is None:
            raise
        return _signing(catalog)
    config = vendor.client_properties(credentials)
    under = "v1/" if session_prefix is None else f"v1/{session_prefix}/"
    answer_config = {**config, REFRESH_CREDENTIALS_ENDPOINT:
                     f"{under}namespaces/{namespace}/tables/{table}/credentials"}
    return StorageAccess(answer_config, [{"prefix": key, "config": config} for key in keys])


def _signing(catalog: CatalogSite) -> StorageAccess:
    """Remote signing, for a store that cannot scope credentials: no keys, the signer's URL."""
    assert catalog.signer is not None
    return StorageAccess(catalog.signer.client_properties(catalog.signer_uri))


def signed_headers(database: Database, catalog: CatalogSite, principal: Principal,
                   method: str, uri: str,
                   headers: dict[str, list[str]]) -> dict[str, list[str]]:
    """The Iceberg S3 signer: ``headers`` signed with the server's keys, when the request reads
    (``GET``, ``HEAD``) an object or lists a prefix inside a table's claimed locations, or
    writes (``PUT``, ``POST``, ``DELETE``) one in a table ``principal`` may write.

    Raises:
        ForbiddenError: anything else (outside every table, a copy, a bucket operation, a write
            the caller may not make); also when the catalog signs nothing.
    """
    signer = catalog.signer
    if signer is None:
        raise ForbiddenError("this catalog signs no requests (METASERVICE_REMOTE_SIGNING)")
    if method not in READ_METHODS | WRITE_METHODS:
        raise ForbiddenError(f"{method} requests are not signed")
    try:
        target = signer.target(method, uri, headers)
    except UnsignableRequestError as exc:
        raise ForbiddenError(f"not signed: {exc}") from None
    # a listing is judged by its prefix's directory: wh/db/a lists wh/db/ab's keys too
    path = target.key.rsplit("/", 1)[0] if target.listing else target.key
    try:
        location = catalog.warehouse.key(f"s3://{target.bucket}/{path}")
    except RefusedError:
        raise ForbiddenError("not signed: outside the warehouse") from None
    with database.transaction(write=False) as session:
        found = repo.table_claiming(session, location)
        if found is None:
            raise ForbiddenError("not signed: the object lies in no table")
        if method in WRITE_METHODS and not may_write(session, principal,
                                                     table_name(catalog, *found)):
            raise ForbiddenError(f"not signed: {'.'.join(found)} is not the caller's to write")
    return signer.sign(method, uri, headers)
