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
from metaservice.catalog.site import CatalogSite, existing_table_namespace, table_name
from metaservice.catalog.storage.credentials import REFRESH_CREDENTIALS_ENDPOINT
from metaservice.catalog.storage.object_store import is_object_store
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
                   metadata_location: str | None = None) -> StorageAccess:
    """Credentials for the table's files, for ``principal``: read-write when it may write the
    table, else read-only (``metadata_location``: the metadata the answer gives, else the
    table's current).

    Raises:
        NoSuchTableError: no such table.
        CredentialsUnavailableError: STS failed or refused.
    """
    namespace = existing_table_namespace(levels, table)
    name = table_name(catalog, namespace, table)
    with database.transaction(write=False) as session:
        location = metadata_location or tables.current_metadata_location(session, namespace,
                                                                         table)
        write = may_write(session, principal, name)
    vendor = catalog.credentials
    if vendor is None:
        return StorageAccess()
    keys = [key for key in catalog.warehouse.confine_table(tables.read_metadata(catalog,
                                                                                location))
            if is_object_store(key)]
    if not keys:
        return StorageAccess()
    credentials = vendor.vend(keys, write=write, caller=principal.name)
    config = vendor.client_properties(credentials)
    answer_config = {**config, REFRESH_CREDENTIALS_ENDPOINT:
                     f"v1/namespaces/{namespace}/tables/{table}/credentials"}
    return StorageAccess(answer_config, [{"prefix": key, "config": config} for key in keys])
