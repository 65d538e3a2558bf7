"""The catalog's rules: namespaces, tables, and commits that obey MetaService (SPEC §11).

A commit is applied in four steps. The first two touch files and hold no database lock; the
last two are one write transaction:

1. *stage*: read the pointers (a read transaction), then the current metadata, validate the
   client's requirements and apply its updates with pyiceberg's own code
   (``requirement.validate``, ``update_table_metadata``), and check that every location of the
   result lies inside the warehouse;
2. *write* the new metadata file to the warehouse (a crash after this leaves an unreferenced
   file only);
3. *swap* the table's pointer by compare-and-swap on the version read in step 1 (tables in name
   order, so two transactions over the same tables never deadlock): a lost race is a 409
   ``CommitFailedException`` and the client refreshes and retries;
4. apply MetaService's rules to what the commit changes (``changes.py``): who may change the
   table, heads that only move forward, and the barrier, expiration and rollback services, in
   the same transaction: a refusal rolls the pointer back with it.

Create, register and drop follow the same split: files first, then one write transaction that
re-checks what the read saw (SPEC §11, Trust: no file I/O under a database write lock).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import CommitTableRequest
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import AssertCreate, update_table_metadata
from sqlalchemy.orm import Session

from metaservice import errors as domain_errors
from metaservice.auth.policy import Role
from metaservice.auth.service import Principal
from metaservice.barriers import service as barriers_service
from metaservice.catalog import (
    consistent_warehouses,
    idempotency,
    pages,
    read_sessions,
    validation,
)
from metaservice.catalog import repository as repo
from metaservice.catalog import sql_view_repository as view_repo
from metaservice.catalog.changes import CommitChanges, commit_changes
from metaservice.catalog.errors import (
    HEAD_NOT_FORWARD,
    TABLE_ALREADY_REGISTERED,
    TABLE_IN_USE,
    AlreadyExistsError,
    BadRequestError,
    CommitFailedError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    RefusedError,
    UnprocessableEntityError,
    not_table_owner,
)
from metaservice.catalog.storage import MetadataFileError, Warehouse
from metaservice.context import ServiceContext
from metaservice.db import locks
from metaservice.db.models import IcebergTableRow, JobRow, TableRow
from metaservice.db.session import Database
from metaservice.expirations import service as expirations_service
from metaservice.names import NAME_PART_PATTERN, TableName
from metaservice.rollback import repository as rollback_repo
from metaservice.tables import repository as tables_repo

logger = logging.getLogger(__name__)


PARQUET_CODEC = "zstd"


@dataclass(frozen=True)
class CatalogSite:
    """The catalog's identity and storage: its name (the first part of every table name) and
    its warehouse."""

    name: str
    warehouse: Warehouse


# -- names -------------------------------------------------------------------------------------


def namespace_name(levels: Sequence[str]) -> str:
    """The one-level namespace a MetaService table name allows (``catalog.database.table``)."""
    if len(levels) != 1:
        raise BadRequestError(
            f"namespace {'.'.join(levels)!r} has {len(levels)} levels; this catalog's tables are "
            "named catalog.database.table, so a namespace has exactly one level")
    return _part(levels[0], "namespace")


_NAME_PART = re.compile(NAME_PART_PATTERN)


def existing_namespace_name(levels: Sequence[str]) -> str:
    """The namespace a read names; one this catalog cannot hold does not exist (404), as engines
    expect when they probe for metadata tables (``db\x1ftable``)."""
    if len(levels) != 1 or not _NAME_PART.match(levels[0]):
        raise NoSuchNamespaceError(f"namespace does not exist: {'.'.join(levels)}")
    return levels[0]


def _part(value: str, what: str) -> str:
    if not _NAME_PART.match(value):
        raise BadRequestError(f"invalid {what} name {value!r}: must match {NAME_PART_PATTERN}")
    return value


def table_name(catalog: CatalogSite, namespace: str, table: str) -> TableName:
    return TableName(catalog.name, namespace, _part(table, "table"))


# -- namespaces --------------------------------------------------------------------------------


def _namespace(session: Session, name: str):  # type: ignore[no-untyped-def]
    row = repo.get_namespace(session, name)
    if row is None:
        raise NoSuchNamespaceError(f"namespace does not exist: {name}")
    return row


def list_namespaces(session: Session, parent: Sequence[str] | None,
                    wanted: pages.Page = pages.EVERYTHING) -> tuple[list[list[str]], str | None]:
    """One page of namespaces, and the next page's token."""
    if parent:
        namespace_name(parent)
        _namespace(session, parent[0])
        return [], None  # one-level namespaces have no children
    names, token = pages.next_token(
        repo.list_namespaces(session, wanted.after, _one_more(wanted)), wanted)
    return [[name] for name in names], token


def _one_more(wanted: pages.Page) -> int | None:
    return None if wanted.size is None else wanted.size + 1


def create_namespace(session: Session, ctx: ServiceContext, catalog: CatalogSite,
                     levels: Sequence[str],
                     properties: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    name = namespace_name(levels)
    _confine_namespace_location(catalog, properties)
    if not repo.create_namespace(session, name, dict(properties), ctx.clock.now_ms()):
        raise AlreadyExistsError(f"namespace already exists: {name}")
    logger.info("catalog_namespace_created", extra={"namespace": name})
    return [name], dict(properties)


def load_namespace(session: Session, levels: Sequence[str]) -> dict[str, str]:
    return dict(_namespace(session, existing_namespace_name(levels)).properties)


def drop_namespace(session: Session, levels: Sequence[str]) -> None:
    name = namespace_name(levels)
    _namespace(session, name)
    if repo.count_tables(session, name) or view_repo.count_views(session, name):
        raise NamespaceNotEmptyError(f"namespace {name} is not empty")
    repo.drop_namespace(session, name)


def _confine_namespace_location(catalog: CatalogSite, properties: dict[str, str]) -> None:
    location = properties.get(NAMESPACE_LOCATION)
    if location is not None:
        catalog.warehouse.key(location, "namespace location")


NAMESPACE_LOCATION = "location"


def update_namespace_properties(session: Session, catalog: CatalogSite, levels: Sequence[str],
                                removals: list[str],
                                updates: dict[str, str]) -> dict[str, list[str]]:
    name = namespace_name(levels)
    _confine_namespace_location(catalog, updates)
    row = _namespace(session, name)
    overlap = set(removals) & set(updates)
    if overlap:
        raise UnprocessableEntityError(
            f"properties both removed and updated: {', '.join(sorted(overlap))}")
    properties = dict(row.properties)
    removed = [key for key in removals if key in properties]
    missing = [key for key in removals if key not in properties]
    for key in removed:
        del properties[key]
    properties.update(updates)
    repo.set_namespace_properties(session, name, properties)
    return {"removed": removed, "updated": list(updates), "missing": missing}


# -- tables ------------------------------------------------------------------------------------


@dataclass
class LoadedTable:
    metadata: TableMetadata
    metadata_location: str | None
    snapshots: str = "all"

    @property
    def etag(self) -> str | None:
        return None if self.metadata_location is None else etag(self.metadata_location,
                                                                 self.snapshots)


def etag(metadata_location: str, snapshots: str = "all") -> str:
    """A table answer's ``ETag``: a metadata file never changes once written, so its location
    (and which snapshots the answer holds) names the answer's content."""
    digest = hashlib.sha256(f"{snapshots}:{metadata_location}".encode()).hexdigest()[:40]
    return f'"{digest}"'


def etag_matches(if_none_match: str | None, tag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``tag`` (or ``*``); weak tags compare equal."""
    if not if_none_match:
        return False
    candidates = [c.strip().removeprefix("W/") for c in if_none_match.split(",")]
    return "*" in candidates or tag in candidates


@dataclass(frozen=True)
class NotModified:
    """A conditional load whose ``If-None-Match`` names the current answer."""

    etag: str


def list_tables(session: Session, levels: Sequence[str],
                wanted: pages.Page = pages.EVERYTHING) -> tuple[list[str], str | None]:
    """One page of a namespace's table names, and the next page's token."""
    name = existing_namespace_name(levels)
    _namespace(session, name)
    return pages.next_token(repo.list_tables(session, name, wanted.after, _one_more(wanted)),
                            wanted)


def _pointer(session: Session, namespace: str, table: str) -> IcebergTableRow:
    pointer = repo.get_pointer(session, namespace, table)
    if pointer is None:
        raise NoSuchTableError(f"table does not exist: {namespace}.{table}")
    return pointer


def read_metadata(catalog: CatalogSite, location: str) -> TableMetadata:
    """A table's own metadata file (its pointer names it)."""
    return catalog.warehouse.read(location)


def load_table(database: Database, catalog: CatalogSite, levels: Sequence[str], table: str,
               snapshots: str = "all",
               if_none_match: str | None = None) -> LoadedTable | NotModified:
    """The table's current metadata, or ``NotModified`` (its file left unread) when
    ``if_none_match`` names it."""
    namespace = _existing_table_namespace(levels, table)
    with database.transaction(write=False) as session:
        location = _pointer(session, namespace, table).metadata_location
    tag = etag(location, snapshots)
    if etag_matches(if_none_match, tag):
        return NotModified(tag)
    metadata = read_metadata(catalog, location)
    return LoadedTable(_with_snapshots(metadata, snapshots), location, snapshots)


def load_table_in_session(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                          prefix: str, principal: Principal, levels: Sequence[str], table: str,
                          snapshots: str = "all") -> LoadedTable:
    """The table as the read session ``prefix`` serves it: the table at the session's cut
    (SPEC §12). The cut is fixed in one transaction, the files are read and written outside
    any, and the cut file is recorded in a second one before it is written."""
    namespace = _existing_table_namespace(levels, table)
    name = table_name(catalog, namespace, table)
    with database.transaction(write=True) as session:
        _pointer(session, namespace, table)
        cut = read_sessions.cut_for(session, ctx, prefix, name, principal)
        # The pointer is read again after the cut: the commit that recorded the cut's snapshot
        # swapped the pointer in the same transaction, so this read sees metadata that has it
        # (read before, on PostgreSQL, it could predate a commit the cut already saw).
        pointer = _pointer(session, namespace, table)
        head_location = pointer.metadata_location
    served = consistent_warehouses.metadata_at(read_metadata(catalog, head_location),
                                               cut.snapshot_id, cut.barrier, cut.kind)
    if served is None:
        raise domain_errors.SnapshotExpiredError(
            f"snapshot {cut.snapshot_id} of {name} at barrier {cut.barrier} is no longer in "
            "the table's metadata (expired outside MetaService)",
            snapshots=[{"table": str(name), "snapshot_id": cut.snapshot_id}])
    # Engines may read the file at metadata-location rather than the answer: it holds the cut.
    location = catalog.warehouse.cut_location(head_location, cut.snapshot_id,
                                              cut.barrier, cut.kind, served)
    # Recorded before it is written: a file on disk whose row never committed is only left
    # behind, a row whose file was never written deletes nothing. The session's lease keeps the
    # snapshot (and so the row) from being expired in between.
    with database.transaction(write=False) as session:
        recorded = repo.cut_file_recorded(session, location)
    if not recorded:
        with database.transaction(write=True) as session:
            repo.record_cut_file(session, location, str(served.table_uuid), cut.snapshot_id,
                                 ctx.clock.now_ms())
    catalog.warehouse.write_shared(served, location)
    return LoadedTable(_with_snapshots(served, snapshots), location, snapshots)


def _with_snapshots(metadata: TableMetadata, snapshots: str) -> TableMetadata:
    """``snapshots=refs`` leaves out the snapshots no ref points at."""
    if snapshots != "refs":
        return metadata
    referenced = {ref.snapshot_id for ref in metadata.refs.values()}
    return metadata.model_copy(update={
        "snapshots": [s for s in metadata.snapshots if s.snapshot_id in referenced]})


def table_exists(session: Session, levels: Sequence[str], table: str) -> None:
    _pointer(session, _existing_table_namespace(levels, table), table)


def _existing_table_namespace(levels: Sequence[str], table: str) -> str:
    if len(levels) != 1 or not _NAME_PART.match(levels[0]):
        raise NoSuchTableError(f"table does not exist: {'.'.join([*levels, table])}")
    return levels[0]


def _claim_locations(session: Session, name: TableName, keys: list[str], table_uuid: str,
                     *, replaces: bool, now_ms: int, status: int = 409) -> None:
    """Refuse an identity another table has, and a location lying inside (or containing) one
    another table claims; then claim ``keys`` for the table (SPEC §11, Trust). Runs under
    ``repo.lock_locations``. ``replaces``: the table's own pointer may hold the uuid already.
    ``status``: 409 ``AlreadyExistsException`` for a create or register, 400 for a commit
    (whose 409 clients would retry)."""
    type_ = "AlreadyExistsException" if status == 409 else None
    holder = repo.table_with_uuid(session, table_uuid)
    if holder is not None and not (replaces and holder == f"{name.database}.{name.table}"):
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
    Runs under ``repo.lock_locations``."""
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


def _refuse_planted(session: Session, name: TableName, principal: Principal) -> None:
    """A name that a running job writes is given a table only by a principal that owns the
    job (or an admin): nobody else plants the table the job will write (SPEC §11, Trust)."""
    row = tables_repo.find_table(session, name)
    if (row is not None and row.writer_job is not None
            and not _acts_for_job(session, principal, row.writer_job)):
        raise not_table_owner(
            f"{name} is the sink of running job {row.writer_job!r} of another token: only its "
            "token (or an admin) creates it", table=str(name), job=row.writer_job)


def create_table(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                 levels: Sequence[str], request: Any, principal: Principal,
                 guard: idempotency.Guard | None = None) -> LoadedTable:
    """Create a table (its first metadata file and its pointer), or with ``stage-create`` only
    answer the metadata it would have: the table is created by the commit that asserts it does
    not exist yet."""
    from pyiceberg.table import TableProperties

    namespace = namespace_name(levels)
    name = table_name(catalog, namespace, request.name)
    with database.transaction(write=False) as session:
        namespace_row = _namespace(session, namespace)
        namespace_location = str(namespace_row.properties.get(NAMESPACE_LOCATION, ""))
        if repo.get_pointer(session, namespace, name.table) is not None:
            raise AlreadyExistsError(f"table already exists: {namespace}.{name.table}")
    if request.location:
        location = catalog.warehouse.confine(request.location, "table location")
    elif namespace_location:
        location = f"{catalog.warehouse.confine(namespace_location)}/{name.table}"
    else:
        location = catalog.warehouse.default_table_location(namespace, name.table)
    properties = dict(request.properties)
    properties.setdefault(TableProperties.FORMAT_VERSION,
                          str(TableProperties.DEFAULT_FORMAT_VERSION))
    # As Iceberg's own catalogs do: engines whose default codec is another (Spark's runtime
    # writes gzip when the property is absent) write zstd, as pyiceberg does.
    properties.setdefault(TableProperties.PARQUET_COMPRESSION, PARQUET_CODEC)
    try:
        metadata = new_table_metadata(
            schema=request.table_schema,
            partition_spec=request.partition_spec or UNPARTITIONED_PARTITION_SPEC,
            sort_order=request.write_order or UNSORTED_SORT_ORDER,
            location=location.rstrip("/"), properties=properties)
    except (*validation.INVALID_METADATA, RecursionError) as exc:
        raise BadRequestError(f"invalid table: {validation.describe(exc)}") from exc
    validation.table_metadata(metadata, catalog.warehouse.root)
    keys = catalog.warehouse.confine_table(metadata)
    if request.stage_create:
        return LoadedTable(metadata, None)
    metadata_location = catalog.warehouse.new_metadata_location(metadata, 0)
    catalog.warehouse.write(metadata, metadata_location)
    with database.transaction(write=True) as session:
        if guard is not None:
            guard.claim(session)
        repo.lock_locations(session)
        _namespace(session, namespace)
        if repo.get_pointer(session, namespace, name.table) is not None:
            raise AlreadyExistsError(f"table already exists: {namespace}.{name.table}")
        _refuse_planted(session, name, principal)
        repo.refuse_view_name(session, namespace, name.table)
        _claim_locations(session, name, keys, str(metadata.table_uuid), replaces=False,
                         now_ms=ctx.clock.now_ms())
        if not repo.insert_pointer(session, namespace, name.table, metadata_location,
                                   ctx.clock.now_ms(), table_uuid=str(metadata.table_uuid),
                                   location=keys[0]):
            raise AlreadyExistsError(f"table already exists: {namespace}.{name.table}")
        if guard is not None:
            guard.finish(session, {"metadata-location": metadata_location})
    logger.info("catalog_table_created", extra={"table": str(name)})
    return LoadedTable(metadata, metadata_location)


def register_table(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                   levels: Sequence[str], name: str, metadata_location: str,
                   overwrite: bool, principal: Principal,
                   guard: idempotency.Guard | None = None) -> LoadedTable:
    """Point a new table at an existing metadata file inside the warehouse. The file is read
    before any transaction; a file of a table the catalog has already (same table-uuid, or a
    location overlapping another table's) is refused. ``overwrite`` replaces a table that no
    running job reads or writes: the table it replaces ends, as a drop ends it."""
    namespace = namespace_name(levels)
    qualified = table_name(catalog, namespace, name)
    catalog.warehouse.key(metadata_location, "metadata file")
    with database.transaction(write=False) as session:
        _namespace(session, namespace)
    try:
        metadata = catalog.warehouse.read(metadata_location)
    except MetadataFileError as exc:
        raise BadRequestError(f"cannot register {metadata_location}: {exc}") from None
    validation.table_metadata(metadata, catalog.warehouse.root)
    keys = catalog.warehouse.confine_table(metadata)
    now = ctx.clock.now_ms()
    with database.transaction(write=True) as session:
        if guard is not None:
            guard.claim(session)
        repo.lock_locations(session)
        _namespace(session, namespace)
        existing = repo.get_pointer(session, namespace, qualified.table)
        if existing is not None:
            if not overwrite:
                raise AlreadyExistsError(f"table already exists: {namespace}.{qualified.table}")
            _refuse_planted(session, qualified, principal)
            if principal.role != Role.admin:
                raise domain_errors.ForbiddenError(
                    f"registering over {qualified} ends that table, as a drop does: it needs "
                    "the admin role", table=str(qualified))
            _end_table(session, qualified, principal, existing)
        _refuse_planted(session, qualified, principal)
        repo.refuse_view_name(session, namespace, qualified.table)
        # A table replaced above released its uuid's claims, not its pointer row: the row is
        # replaced in place, so its uuid may be the one registered.
        _claim_locations(session, qualified, keys, str(metadata.table_uuid),
                         replaces=False, now_ms=now)
        if existing is not None:
            if not repo.swap_pointer(session, namespace, qualified.table,
                                     expected_version=existing.version,
                                     metadata_location=metadata_location, now_ms=now,
                                     table_uuid=str(metadata.table_uuid), location=keys[0]):
                raise CommitFailedError(f"{qualified} changed concurrently; retry")
        elif not repo.insert_pointer(session, namespace, qualified.table, metadata_location,
                                     now, table_uuid=str(metadata.table_uuid),
                                     location=keys[0]):
            raise AlreadyExistsError(f"table already exists: {namespace}.{qualified.table}")
        if guard is not None:
            guard.finish(session, {"metadata-location": metadata_location})
    logger.info("catalog_table_registered", extra={"table": str(qualified),
                                                   "location": metadata_location})
    return LoadedTable(metadata, metadata_location)


@dataclass(frozen=True)
class EndedTable:
    """What is left of a table once it ended: its cut files, and the locations it claimed
    (a purge deletes files under them only)."""

    cut_files: list[str]
    claims: list[str]


def _end_table(session: Session, name: TableName, principal: Principal,
               pointer: IcebergTableRow) -> EndedTable:
    """A drop's (and an overwriting register's) end of a table in MetaService: its barrier
    history, leases, read-session entries, rollback plans, cut files and location claims go
    (SPEC §11, Trust). Refused while a running job reads or writes it."""
    row = tables_repo.find_table(session, name, for_update=True)
    if row is not None:
        jobs = repo.running_jobs_of(session, row.id)
        if jobs:
            if row.writer_job is not None and not _acts_for_job(session, principal,
                                                                row.writer_job):
                raise not_table_owner(
                    f"{name} is written by running job {row.writer_job!r} of another token",
                    table=str(name), job=row.writer_job)
            raise RefusedError(
                TABLE_IN_USE,
                f"{name} is read or written by running job(s) {', '.join(sorted(jobs))}; "
                "unregister them first", {"table": str(name), "jobs": sorted(jobs)})
        repo.delete_table_row(session, row.id)
    if pointer.table_uuid is None:
        return EndedTable([], [])
    return EndedTable(repo.take_cut_files(session, pointer.table_uuid),
                      repo.release_claims(session, pointer.table_uuid))


@dataclass(frozen=True)
class DroppedTable:
    """What a purge deletes once the drop committed: the files of the table's last metadata
    file under the locations it claimed, and the cut files its read sessions served."""

    metadata_location: str
    claims: list[str]
    cut_files: list[str]


def drop_table(database: Database, catalog: CatalogSite, levels: Sequence[str], table: str,
               principal: Principal, guard: idempotency.Guard | None = None) -> DroppedTable:
    """Drop the pointer and end the table (its history, leases, cut files, claims); answers
    what a purge deletes. The pointer goes only if it is still the one read (a rename moves
    its version), so a drop never ends another table that took the name meanwhile."""
    namespace = namespace_name(levels)
    name = table_name(catalog, namespace, table)
    with database.transaction(write=False) as session:
        pointer = _pointer(session, namespace, table)
        version, metadata_location = pointer.version, pointer.metadata_location
        table_uuid = pointer.table_uuid
    claims: list[str] = []
    if table_uuid is None:  # a row older than its identity: the file tells
        try:
            metadata = read_metadata(catalog, metadata_location)
            table_uuid = str(metadata.table_uuid)
            claims = catalog.warehouse.confine_table(metadata)
        except Exception:  # noqa: BLE001 - an unreadable metadata file does not stop a drop
            logger.warning("catalog_drop_metadata_unreadable",
                           extra={"location": metadata_location})
    with database.transaction(write=True) as session:
        if guard is not None:
            guard.claim(session)
        dropped = repo.delete_pointer(session, namespace, table, expected_version=version)
        if dropped is None:
            raise CommitFailedError(f"{name} changed concurrently, or is gone; retry")
        if dropped.table_uuid is None and table_uuid is not None:
            dropped.table_uuid = table_uuid
        ended = _end_table(session, name, principal, dropped)
        if guard is not None:
            guard.finish(session, {})
    logger.info("catalog_table_dropped", extra={"namespace": namespace, "table": table})
    return DroppedTable(metadata_location, ended.claims or claims, ended.cut_files)


def rename_table(session: Session, ctx: ServiceContext, catalog: CatalogSite,
                 principal: Principal, source_levels: Sequence[str], source_table: str,
                 target_levels: Sequence[str], target_table: str) -> None:
    """Rename the pointer, and MetaService's record of the table with it (its barriers follow
    it). A table a running job reads or writes keeps its name: the job knows it by that name."""
    source = table_name(catalog, namespace_name(source_levels), source_table)
    target = table_name(catalog, namespace_name(target_levels), target_table)
    _pointer(session, source.database, source.table)
    _namespace(session, target.database)
    if repo.get_pointer(session, target.database, target.table) is not None:
        raise AlreadyExistsError(f"table already exists: {target.database}.{target.table}")
    _refuse_planted(session, target, principal)
    row = tables_repo.find_table(session, source, for_update=True)
    if row is not None:
        jobs = repo.running_jobs_of(session, row.id)
        if jobs:
            raise RefusedError(
                TABLE_IN_USE,
                f"{source} is read or written by running job(s) {', '.join(sorted(jobs))}; "
                "it keeps its name while they run", {"table": str(source), "jobs": jobs})
        if tables_repo.find_table(session, target) is not None:
            raise AlreadyExistsError(f"MetaService already records a table named {target}")
        repo.rename_table_row(session, row.id, target)
    if not repo.rename_pointer(session, (source.database, source.table),
                               (target.database, target.table), ctx.clock.now_ms()):
        raise NoSuchTableError(f"table does not exist: {source.database}.{source.table}")


# -- commits -----------------------------------------------------------------------------------


@dataclass
class StagedCommit:
    name: TableName
    base: TableMetadata | None
    base_version: int | None
    metadata: TableMetadata
    metadata_location: str
    changed: bool
    # The locations the table claims after the commit, when it creates the table or claims
    # one it did not (set-location, a write.*.path property); None otherwise.
    claims: list[str] | None = None
    # Cut files of the snapshots the commit removed: deleted once it committed.
    removed_cut_files: list[str] = field(default_factory=list)


def parse_commit(body: Any, *, namespace: str | None = None,
                 table: str | None = None) -> CommitTableRequest:
    """A commit request; a single-table commit may leave out the identifier its path gives."""
    if isinstance(body, dict) and body.get("identifier") is None and table is not None:
        body = {**body, "identifier": {"namespace": [namespace], "name": table}}
    return validation.commit_request(body)


# Exceptions pyiceberg raises while it applies a client's updates to metadata: each is the
# client's bad input (a field that does not exist, a type it cannot hold, an empty create).
_BAD_UPDATE = (*validation.INVALID_METADATA, IndexError, AttributeError, RecursionError,
               NotImplementedError, AssertionError)


def _stage(catalog: CatalogSite, name: TableName, pointer: IcebergTableRow | None,
           request: CommitTableRequest) -> StagedCommit:
    """Steps 1 and 2 of a commit, outside any transaction."""
    creating = any(isinstance(r, AssertCreate) for r in request.requirements)
    if pointer is None and not creating:
        raise NoSuchTableError(f"table does not exist: {name.database}.{name.table}")
    base = read_metadata(catalog, pointer.metadata_location) if pointer is not None else None
    try:
        for requirement in request.requirements:
            requirement.validate(base)
    except CommitFailedException as exc:
        raise CommitFailedError(f"requirement failed for {name}: {exc}") from exc
    if pointer is not None and base is not None and not request.updates:
        return StagedCommit(name, base, pointer.version, base, pointer.metadata_location, False)
    try:
        metadata = update_table_metadata(
            base_metadata=base if base is not None else MetastoreCatalog._empty_table_metadata(),
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
    claims = catalog.warehouse.confine_table(metadata)
    moved = base is None or set(claims) != set(catalog.warehouse.confine_table(base))
    version = (MetastoreCatalog._parse_metadata_version(pointer.metadata_location) + 1
               if pointer is not None else 0)
    location = catalog.warehouse.new_metadata_location(metadata, version)
    catalog.warehouse.write(metadata, location)
    return StagedCommit(name, base, pointer.version if pointer is not None else None, metadata,
                        location, True, claims if moved else None)


def _swap(session: Session, ctx: ServiceContext, staged: StagedCommit) -> None:
    name, now = staged.name, ctx.clock.now_ms()
    uuid = str(staged.metadata.table_uuid)
    location = staged.claims[0] if staged.claims else None
    if staged.base_version is None:
        assert location is not None
        if not repo.insert_pointer(session, name.database, name.table,
                                   staged.metadata_location, now, table_uuid=uuid,
                                   location=location):
            raise CommitFailedError(f"table already exists: {name.database}.{name.table}")
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
            raise BadRequestError(f"table {namespace}.{table} appears twice in one transaction")
        seen.add((namespace, table))
    names = [table_name(catalog, namespace, table) for namespace, table, _ in requests]
    with database.transaction(write=False) as session:
        pointers = [repo.get_pointer(session, name.database, name.table) for name in names]
        for name, pointer in zip(names, pointers, strict=True):
            if pointer is None:
                _namespace(session, name.database)
    staged = [_stage(catalog, name, pointer, request)
              for name, pointer, (_, _, request) in zip(names, pointers, requests, strict=True)]
    changed = [one for one in staged if one.changed]
    if not changed:
        return staged
    with database.transaction(write=True) as session:
        if guard is not None:
            guard.claim(session)
        if any(one.claims is not None for one in changed):
            repo.lock_locations(session)
        # Table by table in name order: each new claim is checked against the claims of the
        # tables before it in this transaction too.
        for one in sorted(changed, key=lambda s: s.name):
            if one.claims is not None:
                if one.base is None:
                    _namespace(session, one.name.database)
                    _refuse_planted(session, one.name, principal)
                    repo.refuse_view_name(session, one.name.database, one.name.table)
                _claim_locations(session, one.name, one.claims, str(one.metadata.table_uuid),
                                 replaces=one.base is not None, now_ms=ctx.clock.now_ms(),
                                 status=400)
            _swap(session, ctx, one)
        with locks.unordered(session, len(changed) > 1):  # table by table, as requested
            for one in changed:
                _apply_rules(session, ctx, one, commit_changes(one.base, one.metadata), principal)
        if guard is not None:
            guard.finish(session, {"metadata-location": staged[0].metadata_location}
                         if len(staged) == 1 else {})
    for one in changed:
        logger.info("catalog_commit", extra={"table": str(one.name),
                                             "location": one.metadata_location})
    return staged


def _acts_for_job(session: Session, principal: Principal, job: str) -> bool:
    """Whether ``principal`` may act for ``job``: the token that registered it, or an admin
    (with authentication off every caller is one); a job registered with authentication off
    has no owner (SPEC §9)."""
    if principal.role == Role.admin:
        return True
    owner = session.get(JobRow, job)
    return owner is None or owner.owner is None or owner.owner == principal.name


def _apply_rules(session: Session, ctx: ServiceContext, staged: StagedCommit,
                 changes: CommitChanges, principal: Principal) -> None:
    """SPEC §11: what the commit changes must be allowed, and is recorded, here and now."""
    name = staged.name
    try:
        row = tables_repo.find_table(session, name, for_update=not changes.matters)
        derived = row is not None and row.writer_job is not None
        if derived:
            assert row is not None
            _check_derived_update(session, row, staged, changes, principal)
        if not changes.matters:
            return
        if changes.main_removed:
            raise RefusedError(HEAD_NOT_FORWARD,
                               f"main of {name} cannot be removed (it names the table's "
                               "current state; move it forward instead)", {"table": str(name)})
        if changes.moved_back_to is not None:
            _check_rollback(session, name, changes.moved_back_to)
        elif changes.not_forward:
            assert changes.new_main is not None
            if not _rollback_targets(session, name, changes.new_main):
                raise RefusedError(
                    HEAD_NOT_FORWARD,
                    f"main of {name} moves only to a descendant of snapshot {changes.old_main}; "
                    f"snapshot {changes.new_main} is none (a table with history is not "
                    "replaced: overwrite its rows instead)",
                    {"table": str(name), "head": changes.old_main,
                     "snapshot_id": changes.new_main})
        head = changes.new_head
        if head is not None:
            barrier = _barrier(head.barrier)
            # Compaction is maintenance: an admin's, or (of a derived table) its job owner's.
            maintainer = principal.role == Role.admin or (
                derived and row is not None and row.writer_job is not None
                and _owns_job(session, principal, row.writer_job))
            if (changes.compaction and maintainer
                    and _same_rows(staged, head.snapshot_id, head.parent_id)):
                assert head.parent_id is not None
                _take_over(session, name, replaced=head.parent_id,
                           replacement=head.snapshot_id)
            elif head.job is not None:
                if not _acts_for_job(session, principal, head.job):
                    raise domain_errors.ForbiddenError(
                        f"job {head.job!r} was registered by another token", job=head.job)
                barriers_service.commit(session, ctx, head.job, name, barrier=barrier,
                                        snapshot_id=head.snapshot_id, via_catalog=True)
            else:
                barriers_service.report_root(session, ctx, name, snapshot_id=head.snapshot_id,
                                             barrier=barrier, via_catalog=True)
        if changes.removed_snapshots:
            _expire(session, ctx, name, changes.removed_snapshots)
            # No live session serves a removed snapshot (its lease would have refused the
            # expiration), and no session serves it again: its cut files go.
            staged.removed_cut_files = repo.take_cut_files(
                session, str(staged.metadata.table_uuid), changes.removed_snapshots)
    except domain_errors.MetaServiceError as exc:
        logger.info("catalog_commit_refused", extra={"table": str(name), "code": exc.code})
        raise RefusedError.from_domain(exc, commit=True) from exc
    except RefusedError as exc:
        logger.info("catalog_commit_refused", extra={"table": str(name), "code": exc.code})
        raise


def _owns_job(session: Session, principal: Principal, job: str) -> bool:
    """Whether ``principal`` is the token that registered ``job`` (with authentication off,
    every caller and every job have no name, and so match; a job registered that way has no
    owner, and any writer acts for it, as SPEC §9 lets it)."""
    row = session.get(JobRow, job)
    return row is None or row.owner is None or row.owner == principal.name


def _check_derived_update(session: Session, row: TableRow, staged: StagedCommit,
                          changes: CommitChanges, principal: Principal) -> None:
    """A table a running job writes changes only through the token that owns that job (its
    barrier commits, and metadata changes that add no snapshot) or an admin's maintenance and
    commits for the job (SPEC §11, Trust): an admin that does not own the job changes neither
    its schema, spec, sort order, location nor its own properties."""
    name, job = staged.name, row.writer_job
    assert job is not None
    if not _owns_job(session, principal, job):
        if principal.role != Role.admin:
            raise not_table_owner(
                f"{name} is written by running job {job!r}: only the token that registered it "
                "(or an admin's maintenance) changes it", table=str(name), job=job)
        changed = _metadata_changes(staged.base, staged.metadata)
        if changed:
            raise not_table_owner(
                f"{name} is written by running job {job!r}: an admin's commit there is "
                f"maintenance (compaction, expiration), not a change of {', '.join(changed)}",
                table=str(name), job=job)
    if changes.side_snapshots:
        raise domain_errors.TableHasWriterError(
            f"{name} is written by running job {job!r}: only its barrier commits add snapshots "
            f"(snapshot(s) {changes.side_snapshots} are not on main)",
            table=str(name), writer=job)


def _metadata_changes(base: TableMetadata | None, new: TableMetadata) -> list[str]:
    """What a commit changes of a table besides its snapshots and ``main``: its location,
    schema, partition spec, sort order, format, other refs, and properties other than
    MetaService's own (``metaservice.*``, which barrier commits set)."""
    if base is None:
        return ["the table"]
    def own(properties: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in properties.items() if not k.startswith("metaservice.")}

    def refs(metadata: TableMetadata) -> dict[str, Any]:
        return {k: v for k, v in metadata.refs.items() if k != MAIN_BRANCH}

    checks = {
        "location": base.location != new.location,
        "schema": (base.current_schema_id, len(base.schemas))
        != (new.current_schema_id, len(new.schemas)),
        "partition spec": (base.default_spec_id, len(base.partition_specs))
        != (new.default_spec_id, len(new.partition_specs)),
        "sort order": (base.default_sort_order_id, len(base.sort_orders))
        != (new.default_sort_order_id, len(new.sort_orders)),
        "format version": base.format_version != new.format_version,
        "refs": refs(base) != refs(new),
        "properties": own(base.properties) != own(new.properties),
    }
    return [what for what, differs in checks.items() if differs]


def _same_rows(staged: StagedCommit, snapshot_id: int, parent_id: int | None) -> bool:
    """A compaction rewrites files, not rows: its total record count is its parent's."""
    new = staged.metadata.snapshot_by_id(snapshot_id)
    old = staged.metadata.snapshot_by_id(parent_id) if parent_id is not None else None
    if new is None or old is None or new.summary is None or old.summary is None:
        return False
    new_total = new.summary.additional_properties.get("total-records")
    old_total = old.summary.additional_properties.get("total-records")
    return new_total is not None and new_total == old_total


def _barrier(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise BadRequestError(
            f"metaservice {domain_errors.InvalidRequestError.code}: snapshot property "
            f"metaservice.barrier must be an integer, not {value[:50]!r}") from None


def _take_over(session: Session, name: TableName, *, replaced: int,
               replacement: int) -> None:
    row = tables_repo.find_table(session, name, for_update=True)
    if row is None:
        return
    moved = repo.take_over_barriers(session, row.id, replaced=replaced, replacement=replacement)
    logger.info("catalog_compaction", extra={"table": str(name), "replaced": replaced,
                                             "snapshot_id": replacement, "barriers": moved})


def _expire(session: Session, ctx: ServiceContext, name: TableName,
            removed: list[int]) -> None:
    if tables_repo.find_table(session, name) is None:
        return  # MetaService records nothing of this table: nothing is protected
    approval = expirations_service.request_expiration(session, ctx, name, removed,
                                                      approve_unknown=True)
    refused = [r for r in approval.refused if r.reason != expirations_service.ALREADY_EXPIRED]
    if refused:
        reasons = {str(r.snapshot_id): list(r.reasons) for r in refused}
        raise domain_errors.SnapshotProtectedError(
            f"{len(refused)} snapshot(s) of {name} are protected: "
            + "; ".join(f"{s} ({', '.join(why)})" for s, why in reasons.items()),
            table=str(name), protected=reasons)
    if approval.approved:
        expirations_service.complete_expiration(session, ctx, approval.expiration_id,
                                                approval.approved)


def _rollback_targets(session: Session, name: TableName, snapshot_id: int) -> bool:
    """Whether an applied rollback plan targets ``name`` at ``snapshot_id``."""
    row = tables_repo.find_table(session, name)
    if row is None:
        return False
    plan_id = rollback_repo.fences_on(session, [row.id]).get(row.id)
    plan = rollback_repo.get_plan(session, plan_id) if plan_id is not None else None
    if plan is None:
        return False
    for entry in plan.document.get("tables", []):
        target = entry.get("target")
        if (entry.get("table") == str(name) and target is not None
                and int(target.get("snapshot_id")) == snapshot_id):
            return True
    return False


def _check_rollback(session: Session, name: TableName, snapshot_id: int) -> None:
    if tables_repo.find_table(session, name) is None:
        return  # no barrier of this table is recorded: moving main back breaks nothing
    if not _rollback_targets(session, name, snapshot_id):
        raise domain_errors.RollbackPlanNotAppliedError(
            f"main of {name} may move back to snapshot {snapshot_id} only under an applied "
            "rollback plan that targets it", table=str(name), snapshot_id=snapshot_id)


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
            metadata = read_metadata(catalog, location)
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
                _claim_locations(session, table_name(catalog, namespace, table), keys,
                                 str(metadata.table_uuid), replaces=True, now_ms=now_ms)
        except RefusedError as exc:
            logger.warning("catalog_identity_conflict",
                           extra={"table": f"{namespace}.{table}", "code": exc.code})
            continue
        filled += 1
    return filled
