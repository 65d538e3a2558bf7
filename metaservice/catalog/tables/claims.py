"""A table's identity and the locations it claims
(docs/contract.md#files-stay-inside-the-warehouse): no two tables share a table-uuid, and no table's
or view's files lie inside another's. Claims are checked and taken under
``repository.lock_locations``."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from metaservice.catalog.errors import TABLE_ALREADY_REGISTERED, RefusedError
from metaservice.catalog.site import CatalogSite, table_name
from metaservice.catalog.tables import repository as repo
from metaservice.db.session import Database
from metaservice.names import TableName, dotted_namespace

logger = logging.getLogger(__name__)


def claim_table_locations(session: Session, name: TableName, keys: list[str],
                          table_uuid: str, *, replaces: bool, now_ms: int,
                          status: int = 409) -> None:
    """Refuse an identity another table has, and a location lying inside (or containing) one
    another table claims; then claim ``keys`` for the table (docs/contract.md#who-changes-a-table).
    Runs under ``repo.lock_locations``. ``replaces``: the table's own pointer may hold the uuid
    already. ``status``: 409 ``AlreadyExistsException`` for a create or register, 400 for a commit
    (whose 409 clients would retry)."""
    type_ = "AlreadyExistsException" if status == 409 else None
    holder = repo.table_with_uuid(session, table_uuid)
    if holder is not None and not (replaces and holder == f"{dotted_namespace(name.database, name.table)}"):
        raise RefusedError(
            TABLE_ALREADY_REGISTERED,
            f"the catalog already has this table (table-uuid {table_uuid}) as {holder}",
            {"table": holder}, status_code=status, type_=type_)
    claim_locations(session, str(name), keys, table_uuid, code=TABLE_ALREADY_REGISTERED,
                    status=status, now_ms=now_ms)


def claim_locations(session: Session, what: str, keys: list[str], owner_uuid: str, *,
                    code: str, status: int, now_ms: int) -> None:
    """Claim ``keys`` for the table or view ``owner_uuid`` (named ``what``), unless one lies
    inside, or contains, a location another table or view claims: then refuse with ``code``.
    Runs under ``repo.lock_locations``. The uuid of a dropped table being purged is refused
    too: its claims are held by the purge, which deletes every file under them."""
    if repo.purge_pending(session, owner_uuid):
        raise RefusedError(
            code, f"{what} has the uuid {owner_uuid} of a dropped table whose files are being "
            "purged", {"uuid": owner_uuid}, status_code=status,
            type_="AlreadyExistsException" if status == 409 else None)
    for key in keys:
        overlapping = repo.claims_overlapping(session, key, owner_uuid)
        if overlapping:
            claim, other = overlapping[0]
            raise RefusedError(
                code, f"{key} (a location of {what}) overlaps {claim}, a location of {other}: "
                "no table's or view's files lie inside another's",
                {"table": other, "location": claim}, status_code=status,
                type_="AlreadyExistsException" if status == 409 else None)
    repo.add_claims(session, owner_uuid, keys, now_ms)


def fill_identities(database: Database, catalog: CatalogSite, now_ms: int) -> int:
    """Give rows older than revision 0010 their table-uuid and the claims of their locations
    (read from their metadata files outside any transaction); answers how many were filled.
    A table whose uuid or locations another has already is left without (and logged)."""
    with database.transaction(write=False) as session:
        rows = [(r.namespace, r.name, r.version, r.metadata_location)
                for r in repo.pointers_without_identity(session)]
    filled = 0
    for namespace, table, version, location in rows:
        try:
            metadata = catalog.warehouse.read(location)
            keys = catalog.warehouse.confine_table(metadata)
        except Exception:  # noqa: BLE001 - left as it is; logged
            logger.warning("catalog_identity_unreadable", extra={"location": location})
            continue
        try:
            with database.transaction(write=True) as session:
                repo.lock_locations(session)
                if not repo.set_identity(session, namespace, table, version=version,
                                         table_uuid=str(metadata.table_uuid),
                                         location=keys[0]):
                    continue  # committed meanwhile: its commit recorded the identity
                claim_table_locations(session, table_name(catalog, namespace, table), keys,
                                      str(metadata.table_uuid), replaces=True, now_ms=now_ms)
        except RefusedError as exc:
            logger.warning("catalog_identity_conflict",
                           extra={"table": f"{dotted_namespace(namespace, table)}", "code": exc.code})
            continue
        filled += 1
    return filled
