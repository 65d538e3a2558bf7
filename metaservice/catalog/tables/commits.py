"""Commits to one or more tables, all or none, that obey MetaService
(docs/contract.md#the-built-in-catalog).

A commit is one read transaction and one write transaction. The first two steps touch files
and hold no database lock; the last two are the write transaction:

1. *stage*: read the pointers, the request's ``Idempotency-Key`` (a finished key is answered
   from its outcome) and, for a table to create, its namespace, in one read transaction; then
   the current metadata, validate the client's requirements and apply its updates with
   pyiceberg's own code (``requirement.validate``, ``update_table_metadata``), and check that
   every location of the result lies inside the warehouse;
2. *write* the new metadata file to the warehouse (a crash after this leaves an unreferenced
   file only);
3. *swap* the table's pointer by compare-and-swap on the version read in step 1 (tables in name
   order, so two transactions over the same tables never deadlock): a lost race is a 409
   ``CommitFailedException`` and the client refreshes and retries;
4. apply MetaService's rules to what the commit changes (``commit_rules.py``): who may change
   the table, heads that only move forward, and the barrier, expiration and rollback services,
   in the same transaction: a refusal rolls the pointer back with it. Under a key, the key is
   claimed first and a final refusal is recorded as its outcome in the same transaction (the
   steps roll back to a savepoint).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableRequest
from pyiceberg.table.metadata import TableMetadata, TableMetadataV1
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.update import (
    AssertCreate,
    AssertCurrentSchemaId,
    AssertDefaultSortOrderId,
    AssertDefaultSpecId,
    AssertLastAssignedFieldId,
    AssertLastAssignedPartitionId,
    AssertRefSnapshotId,
    AssertTableUUID,
    TableRequirement,
    update_table_metadata,
)
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from metaservice.auth.service import Principal
from metaservice.catalog import idempotency
from metaservice.catalog.errors import (
    HEAD_NOT_FORWARD,
    BadRequestError,
    CommitFailedError,
    IcebergError,
    NoSuchTableError,
    RefusedError,
)
from metaservice.catalog.namespaces.service import namespace_row
from metaservice.catalog.site import CatalogSite, table_name
from metaservice.catalog.tables import repository as repo
from metaservice.catalog.tables import validation
from metaservice.catalog.tables.changes import StagedCommit, commit_changes
from metaservice.catalog.tables.claims import claim_table_locations
from metaservice.catalog.tables.commit_rules import apply_rules
from metaservice.catalog.tables.owners import refuse_planted
from metaservice.context import ServiceContext
from metaservice.db import locks
from metaservice.db.session import Database
from metaservice.errors import MetaServiceError
from metaservice.names import TableName, dotted_namespace
from metaservice.repositories import tables as tables_repo

logger = logging.getLogger(__name__)


# Exceptions pyiceberg raises while it applies a client's updates to metadata: each is the
# client's bad input (a field that does not exist, a type it cannot hold, an empty create).
_BAD_UPDATE: tuple[type[Exception], ...] = (
    *validation.INVALID_METADATA, IndexError, AttributeError, RecursionError, NotImplementedError,
    AssertionError)


def _empty_metadata() -> TableMetadata:
    """What a commit that creates a table applies its updates to: as pyiceberg's own catalogs
    do (``MetastoreCatalog._empty_table_metadata``), format version 1 with no columns; the
    commit's updates upgrade it and add what it has."""
    return TableMetadataV1.model_construct(last_column_id=-1, schema=Schema())


def _next_metadata_version(metadata_location: str) -> int:
    """The version of the metadata file that follows ``metadata_location`` (``00003-<uuid>``
    follows ``00002-<uuid>``; 0 after a file not named so, a registered one).

    pyiceberg has no public function for this: it is the one private helper the catalog
    calls, checked against pyiceberg 0.12.x (``MetastoreCatalog._parse_metadata_version``,
    which answers -1 for a name that has no version)."""
    return MetastoreCatalog._parse_metadata_version(metadata_location) + 1


def _stage(catalog: CatalogSite, name: TableName, pointer: repo.Pointer | None,
           request: CommitTableRequest) -> StagedCommit:
    """Steps 1 and 2 of a commit, outside any transaction."""
    creating = any(isinstance(r, AssertCreate) for r in request.requirements)
    if pointer is None and not creating:
        raise NoSuchTableError(f"Table does not exist: {dotted_namespace(name.database, name.table)}")
    base = catalog.warehouse.read(pointer.metadata_location) if pointer is not None else None
    for requirement in request.requirements:
        try:
            requirement.validate(base)
        except CommitFailedException as exc:
            raise CommitFailedError(f"{_failed(requirement, base) or exc} ({name})") from exc
    if pointer is not None and base is not None and not request.updates:
        return StagedCommit(name, base, pointer.version, base, pointer.metadata_location, False)
    try:
        metadata = update_table_metadata(
            base_metadata=base if base is not None else _empty_metadata(),
            updates=request.updates, enforce_validation=base is None,
            metadata_location=pointer.metadata_location if pointer is not None else None)
    except CommitFailedException as exc:
        raise CommitFailedError(f"{name}: {exc}") from exc
    except _BAD_UPDATE as exc:
        raise BadRequestError(f"invalid update of {name}: {validation.describe(exc)}") from exc
    if base is not None and metadata.table_uuid != base.table_uuid:
        raise BadRequestError(f"invalid update of {name}: a table's uuid never changes")
    if metadata.refs.get(MAIN_BRANCH) is not None and (
            metadata.refs[MAIN_BRANCH].snapshot_ref_type != SnapshotRefType.BRANCH):
        raise RefusedError(HEAD_NOT_FORWARD, f"main of {name} is a branch; it cannot become a tag",
                           {"table": str(name)})
    validation.table_update(base, metadata, catalog.warehouse.root)
    validation.writable_format(metadata)
    claims = catalog.warehouse.confine_table(metadata)
    moved = base is None or set(claims) != set(catalog.warehouse.confine_table(base))
    version = _next_metadata_version(pointer.metadata_location) if pointer is not None else 0
    location = catalog.warehouse.new_metadata_location(metadata, version)
    catalog.warehouse.write(metadata, location)
    return StagedCommit(name, base, pointer.version if pointer is not None else None, metadata,
                        location, True, claims if moved else None)


def _failed(requirement: TableRequirement, base: TableMetadata | None) -> str | None:
    """Why ``requirement`` failed on ``base``, in the words of Iceberg's own REST catalogs
    (``UpdateRequirement`` in Java, which clients and their tests match); None where pyiceberg's
    own words are all there is (no table to check against)."""
    if isinstance(requirement, AssertCreate):
        return "Requirement failed: table already exists"
    if base is None:
        return None
    if isinstance(requirement, AssertRefSnapshotId):
        ref = base.refs.get(requirement.ref)
        if ref is None:
            return (f"Requirement failed: branch or tag {requirement.ref} is missing, expected "
                    f"{requirement.snapshot_id}")
        kind = "branch" if ref.snapshot_ref_type == SnapshotRefType.BRANCH else "tag"
        if requirement.snapshot_id is None:
            return f"Requirement failed: {kind} {requirement.ref} was created concurrently"
        return (f"Requirement failed: {kind} {requirement.ref} has changed: expected id "
                f"{requirement.snapshot_id} != {ref.snapshot_id}")
    checked = _CHECKED.get(type(requirement))
    if checked is None:
        return None
    what, asked, held = checked
    expected, found = getattr(requirement, asked), getattr(base, held)
    if isinstance(requirement, AssertTableUUID):
        return f"Requirement failed: {what}: expected {expected} != {found}"
    return f"Requirement failed: {what}: expected id {expected} != {found}"


# What each requirement checks, in Iceberg's words: (what changed, the requirement's field, the
# metadata's field).
_CHECKED: dict[type[TableRequirement], tuple[str, str, str]] = {
    AssertTableUUID: ("UUID does not match", "uuid", "table_uuid"),
    AssertLastAssignedFieldId: ("last assigned field id changed", "last_assigned_field_id",
                                "last_column_id"),
    AssertCurrentSchemaId: ("current schema changed", "current_schema_id", "current_schema_id"),
    AssertLastAssignedPartitionId: ("last assigned partition id changed",
                                    "last_assigned_partition_id", "last_partition_id"),
    AssertDefaultSpecId: ("default partition spec changed", "default_spec_id",
                          "default_spec_id"),
    AssertDefaultSortOrderId: ("default sort order changed", "default_sort_order_id",
                               "default_sort_order_id"),
}


def _swap(session: Session, ctx: ServiceContext, staged: StagedCommit) -> None:
    name, now = staged.name, ctx.clock.now_ms()
    uuid = str(staged.metadata.table_uuid)
    location = staged.claims[0] if staged.claims else None
    if staged.base_version is None:
        assert location is not None
        if not repo.insert_pointer(session, name.database, name.table,
                                   staged.metadata_location, now, table_uuid=uuid,
                                   location=location):
            raise CommitFailedError(f"Table already exists: {dotted_namespace(name.database, name.table)}")
    elif not repo.swap_pointer(session, name.database, name.table,
                               expected_version=staged.base_version,
                               metadata_location=staged.metadata_location, now_ms=now,
                               table_uuid=uuid, location=location):
        raise CommitFailedError(f"{name} was changed by a concurrent commit; refresh and retry")


def commit_tables(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                  requests: Sequence[tuple[str, str, CommitTableRequest]],
                  principal: Principal,
                  guard: idempotency.Guard | None = None) -> list[StagedCommit]:
    """Commit to one or more tables, all or none (``(namespace, table, request)`` each), as
    ``principal``."""
    seen: set[tuple[str, str]] = set()
    for namespace, table, _ in requests:
        if (namespace, table) in seen:
            raise BadRequestError(f"table {dotted_namespace(namespace, table)} appears twice in one transaction")
        seen.add((namespace, table))
    names = [table_name(catalog, namespace, table) for namespace, table, _ in requests]
    with database.reading() as connection:
        pointers = _read_phase(connection, names, guard)
    staged = [_stage(catalog, name, pointer, request)
              for name, pointer, (_, _, request) in zip(names, pointers, requests, strict=True)]
    changed = [one for one in staged if one.changed]
    if not changed:
        return staged
    refusal: Exception | None = None
    with database.transaction(write=True) as session:
        if guard is None:
            _write_phase(session, ctx, changed, principal)
        else:
            guard.claim(session)
            try:
                with session.begin_nested():
                    _write_phase(session, ctx, changed, principal)
            except (IcebergError, MetaServiceError) as exc:
                if not guard.keep_refusal(session, exc):
                    raise
                refusal = exc  # recorded: raised once the record committed
            else:
                guard.finish(session, {"metadata-location": staged[0].metadata_location}
                             if len(staged) == 1 else {})
    if refusal is not None:
        raise refusal
    for one in changed:
        logger.info("catalog_commit", extra={"table": str(one.name),
                                             "location": one.metadata_location})
    return staged


def _read_phase(connection: Connection, names: list[TableName],
                guard: idempotency.Guard | None) -> list[repo.Pointer | None]:
    """The pointers, on a plain connection (the hot path: an append to an existing table),
    then the key (after them: a key finished before the pointers were read is seen), and the
    namespace of a table to create, in one read transaction.

    Raises:
        idempotency.Replay: the key has an outcome.
    """
    pointers = [repo.read_pointer(connection, name.database, name.table) for name in names]
    if guard is not None:
        guard.look(connection)
    if any(pointer is None for pointer in pointers):
        with contextlib.closing(Session(bind=connection)) as session:
            for name, pointer in zip(names, pointers, strict=True):
                if pointer is None:
                    namespace_row(session, name.database)
    return pointers


def _write_phase(session: Session, ctx: ServiceContext, changed: list[StagedCommit],
                 principal: Principal) -> None:
    """Steps 3 and 4: the claims, the swaps, MetaService's rules."""
    if any(one.claims is not None for one in changed):
        repo.lock_locations(session)
    # Table by table in name order: each new claim is checked against the claims of the
    # tables before it in this transaction too.
    for one in sorted(changed, key=lambda s: s.name):
        if one.claims is not None:
            if one.base is None:
                namespace_row(session, one.name.database)
                refuse_planted(session, one.name, principal)
                repo.refuse_view_name(session, one.name.database, one.name.table)
            claim_table_locations(session, one.name, one.claims, str(one.metadata.table_uuid),
                                  replaces=one.base is not None, now_ms=ctx.clock.now_ms(),
                                  status=400)
        _swap(session, ctx, one)
    if len(changed) > 1:
        _lock_up_front(session, changed)
    for one in changed:
        apply_rules(session, ctx, one, commit_changes(one.base, one.metadata), principal)


def _lock_up_front(session: Session, changed: list[StagedCommit]) -> None:
    """A transaction over several tables takes the locks their barrier commits will ask for
    before the first one, in the lock order (``db/locks.py``): the topology row, the tables'
    running writers by name, the tables by id. Taken table by table in the request's order,
    two such transactions could each hold a lock the other waits for."""
    rows = tables_repo.find_tables(session, [one.name for one in changed])
    locks.lock_topology(session)
    locks.lock_jobs(session, [r.writer_job for r in rows.values() if r.writer_job is not None])
    locks.lock_tables(session, [r.id for r in rows.values()])
