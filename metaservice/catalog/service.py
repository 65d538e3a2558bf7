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

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import CommitTableRequest
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import AssertCreate, update_table_metadata
from sqlalchemy.orm import Session

from metaservice import errors as domain_errors
from metaservice.auth.policy import Role
from metaservice.auth.service import Principal
from metaservice.barriers import service as barriers_service
from metaservice.catalog import read_sessions, views
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


def list_namespaces(session: Session, parent: Sequence[str] | None) -> list[list[str]]:
    if parent:
        namespace_name(parent)
        _namespace(session, parent[0])
        return []  # one-level namespaces have no children
    return [[name] for name in repo.list_namespaces(session)]


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


def list_tables(session: Session, levels: Sequence[str]) -> list[str]:
    name = existing_namespace_name(levels)
    _namespace(session, name)
    return repo.list_tables(session, name)


def _pointer(session: Session, namespace: str, table: str) -> IcebergTableRow:
    pointer = repo.get_pointer(session, namespace, table)
    if pointer is None:
        raise NoSuchTableError(f"table does not exist: {namespace}.{table}")
    return pointer


def read_metadata(catalog: CatalogSite, location: str) -> TableMetadata:
    """A table's own metadata file (its pointer names it)."""
    return catalog.warehouse.read(location)


def load_table(database: Database, catalog: CatalogSite, levels: Sequence[str], table: str,
               snapshots: str = "all") -> LoadedTable:
    namespace = _existing_table_namespace(levels, table)
    with database.transaction(write=False) as session:
        location = _pointer(session, namespace, table).metadata_location
    metadata = read_metadata(catalog, location)
    return LoadedTable(_with_snapshots(metadata, snapshots), location)


def load_table_in_view(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                       prefix: str, principal: Principal, levels: Sequence[str], table: str,
                       snapshots: str = "all") -> LoadedTable:
    """The table as the read session ``prefix`` serves it: its metadata at the session's cut
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
    served = views.metadata_at(read_metadata(catalog, head_location),
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
    return LoadedTable(_with_snapshots(served, snapshots), location)


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


def _claim_location(session: Session, catalog: CatalogSite, name: TableName, location_key: str,
                    table_uuid: str | None, *, exclude_self: bool) -> None:
    """Refuse a location another table's lies inside of, or contains, and an identity another
    table has (SPEC §11, Trust). Runs under ``repo.lock_locations``."""
    this = (name.database, name.table) if exclude_self else None
    if table_uuid is not None:
        holder = repo.table_with_uuid(session, table_uuid)
        if holder is not None and (this is None or holder != f"{this[0]}.{this[1]}"):
            raise RefusedError(
                TABLE_ALREADY_REGISTERED,
                f"the catalog already has this table (table-uuid {table_uuid}) as {holder}",
                {"table": holder}, status_code=409, type_="AlreadyExistsException")
    overlapping = repo.tables_overlapping(session, location_key, exclude=this)
    if overlapping:
        raise RefusedError(
            TABLE_ALREADY_REGISTERED,
            f"the location of {name} overlaps that of {', '.join(sorted(overlapping))}: no "
            "table's location lies inside another's", {"tables": sorted(overlapping)},
            status_code=409, type_="AlreadyExistsException")


def create_table(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                 levels: Sequence[str], request: Any) -> LoadedTable:
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
    except (ValueError, ValidationError, KeyError, TypeError, RecursionError) as exc:
        raise BadRequestError(f"invalid table: {_reason(exc)}") from exc
    location_key = catalog.warehouse.confine_table(metadata)
    if request.stage_create:
        return LoadedTable(metadata, None)
    metadata_location = catalog.warehouse.new_metadata_location(metadata, 0)
    catalog.warehouse.write(metadata, metadata_location)
    with database.transaction(write=True) as session:
        repo.lock_locations(session)
        _namespace(session, namespace)
        if repo.get_pointer(session, namespace, name.table) is not None:
            raise AlreadyExistsError(f"table already exists: {namespace}.{name.table}")
        _claim_location(session, catalog, name, location_key, str(metadata.table_uuid),
                        exclude_self=False)
        if not repo.insert_pointer(session, namespace, name.table, metadata_location,
                                   ctx.clock.now_ms(), table_uuid=str(metadata.table_uuid),
                                   location=location_key):
            raise AlreadyExistsError(f"table already exists: {namespace}.{name.table}")
    logger.info("catalog_table_created", extra={"table": str(name)})
    return LoadedTable(metadata, metadata_location)


def register_table(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                   levels: Sequence[str], name: str, metadata_location: str,
                   overwrite: bool, principal: Principal) -> LoadedTable:
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
    location_key = catalog.warehouse.confine_table(metadata)
    now = ctx.clock.now_ms()
    with database.transaction(write=True) as session:
        repo.lock_locations(session)
        _namespace(session, namespace)
        existing = repo.get_pointer(session, namespace, qualified.table)
        if existing is not None:
            if not overwrite:
                raise AlreadyExistsError(f"table already exists: {namespace}.{qualified.table}")
            _end_table(session, qualified, principal, existing)
        _claim_location(session, catalog, qualified, location_key, str(metadata.table_uuid),
                        exclude_self=existing is not None)
        if existing is not None:
            if not repo.swap_pointer(session, namespace, qualified.table,
                                     expected_version=existing.version,
                                     metadata_location=metadata_location, now_ms=now,
                                     table_uuid=str(metadata.table_uuid),
                                     location=location_key):
                raise CommitFailedError(f"{qualified} changed concurrently; retry")
        elif not repo.insert_pointer(session, namespace, qualified.table, metadata_location,
                                     now, table_uuid=str(metadata.table_uuid),
                                     location=location_key):
            raise AlreadyExistsError(f"table already exists: {namespace}.{qualified.table}")
    logger.info("catalog_table_registered", extra={"table": str(qualified),
                                                   "location": metadata_location})
    return LoadedTable(metadata, metadata_location)


def _end_table(session: Session, name: TableName, principal: Principal,
               pointer: IcebergTableRow) -> list[str]:
    """A drop's (and an overwriting register's) end of a table in MetaService: its barrier
    history, leases, read-session entries, rollback plans and cut files go (SPEC §11, Trust).
    Refused while a running job reads or writes it. Answers its cut files' locations."""
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
        return []
    return repo.take_cut_files(session, pointer.table_uuid)


@dataclass(frozen=True)
class DroppedTable:
    """What a purge deletes once the drop committed: the files of the table's last metadata
    file under its location, and the cut files its views served."""

    metadata_location: str
    location: str
    cut_files: list[str]


def drop_table(database: Database, catalog: CatalogSite, levels: Sequence[str], table: str,
               principal: Principal) -> DroppedTable:
    """Drop the pointer and end the table (its history, leases, cut files); answers what a
    purge deletes."""
    namespace = namespace_name(levels)
    name = table_name(catalog, namespace, table)
    with database.transaction(write=False) as session:
        pointer = _pointer(session, namespace, table)
        version, metadata_location = pointer.version, pointer.metadata_location
        table_uuid = pointer.table_uuid
    table_location = None
    if table_uuid is None:  # a row older than its identity: the file tells
        try:
            metadata = read_metadata(catalog, metadata_location)
            table_uuid, table_location = str(metadata.table_uuid), metadata.location
        except Exception:  # noqa: BLE001 - an unreadable metadata file does not stop a drop
            logger.warning("catalog_drop_metadata_unreadable",
                           extra={"location": metadata_location})
    with database.transaction(write=True) as session:
        dropped = repo.delete_pointer(session, namespace, table, expected_version=version)
        if dropped is None:
            raise CommitFailedError(f"{name} changed concurrently, or is gone; retry")
        if dropped.table_uuid is None and table_uuid is not None:
            dropped.table_uuid = table_uuid
        cut_files = _end_table(session, name, principal, dropped)
    if table_location is None:
        try:
            table_location = read_metadata(catalog, metadata_location).location
        except Exception:  # noqa: BLE001 - nothing of it will be purged
            table_location = ""
    logger.info("catalog_table_dropped", extra={"namespace": namespace, "table": table})
    return DroppedTable(metadata_location, table_location, cut_files)


def rename_table(session: Session, ctx: ServiceContext, catalog: CatalogSite,
                 source_levels: Sequence[str], source_table: str,
                 target_levels: Sequence[str], target_table: str) -> None:
    """Rename the pointer, and MetaService's record of the table with it (its barriers follow
    it). A table a running job reads or writes keeps its name: the job knows it by that name."""
    source = table_name(catalog, namespace_name(source_levels), source_table)
    target = table_name(catalog, namespace_name(target_levels), target_table)
    _pointer(session, source.database, source.table)
    _namespace(session, target.database)
    if repo.get_pointer(session, target.database, target.table) is not None:
        raise AlreadyExistsError(f"table already exists: {target.database}.{target.table}")
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
    location_key: str | None = None  # set when the commit creates the table or moves it
    # Cut files of the snapshots the commit removed: deleted once it committed.
    removed_cut_files: list[str] = field(default_factory=list)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0] if exc.errors() else {"msg": str(exc), "loc": ()}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where}: {first['msg']}" if where else str(first["msg"])
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc)[:500] or type(exc).__name__


def parse_commit(body: Any, *, namespace: str | None = None,
                 table: str | None = None) -> CommitTableRequest:
    """A commit request; a single-table commit may leave out the identifier its path gives."""
    if isinstance(body, dict) and body.get("identifier") is None and table is not None:
        body = {**body, "identifier": {"namespace": [namespace], "name": table}}
    try:
        return CommitTableRequest.model_validate(body)
    except (ValidationError, RecursionError) as exc:
        raise BadRequestError(f"invalid commit: {_reason(exc)}") from exc


# Exceptions pyiceberg raises while it applies a client's updates to metadata: each is the
# client's bad input (a field that does not exist, a type it cannot hold, an empty create).
_BAD_UPDATE = (ValueError, ValidationError, KeyError, TypeError, IndexError, AttributeError,
               StopIteration, RecursionError, NotImplementedError, AssertionError)


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
        raise BadRequestError(f"invalid update of {name}: {_reason(exc)}") from exc
    if base is not None and metadata.table_uuid != base.table_uuid:
        raise BadRequestError(f"invalid update of {name}: a table's uuid never changes")
    location_key = catalog.warehouse.confine_table(metadata)
    moved = base is None or metadata.location != base.location
    version = (MetastoreCatalog._parse_metadata_version(pointer.metadata_location) + 1
               if pointer is not None else 0)
    location = catalog.warehouse.new_metadata_location(metadata, version)
    catalog.warehouse.write(metadata, location)
    return StagedCommit(name, base, pointer.version if pointer is not None else None, metadata,
                        location, True, location_key if moved else None)


def _swap(session: Session, ctx: ServiceContext, staged: StagedCommit) -> None:
    name, now = staged.name, ctx.clock.now_ms()
    uuid = str(staged.metadata.table_uuid)
    if staged.base_version is None:
        assert staged.location_key is not None
        if not repo.insert_pointer(session, name.database, name.table,
                                   staged.metadata_location, now, table_uuid=uuid,
                                   location=staged.location_key):
            raise CommitFailedError(f"table already exists: {name.database}.{name.table}")
    elif not repo.swap_pointer(session, name.database, name.table,
                               expected_version=staged.base_version,
                               metadata_location=staged.metadata_location, now_ms=now,
                               table_uuid=uuid, location=staged.location_key):
        raise CommitFailedError(f"{name} was changed by a concurrent commit; refresh and retry")


def commit_tables(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                  requests: Sequence[tuple[str, str, CommitTableRequest]],
                  principal: Principal) -> list[StagedCommit]:
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
        if any(one.location_key is not None for one in changed):
            repo.lock_locations(session)
            for one in changed:
                if one.location_key is not None:
                    if one.base is None:
                        _namespace(session, one.name.database)
                    _claim_location(session, catalog, one.name, one.location_key,
                                    str(one.metadata.table_uuid),
                                    exclude_self=one.base is not None)
        for one in sorted(changed, key=lambda s: s.name):
            _swap(session, ctx, one)
        for one in changed:
            _apply_rules(session, ctx, one, commit_changes(one.base, one.metadata), principal)
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
        if row is not None and row.writer_job is not None:
            _check_derived_update(session, row, name, changes, principal)
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
            if changes.compaction and _same_rows(staged, head.snapshot_id, head.parent_id):
                assert head.parent_id is not None
                _take_over(session, name, replaced=head.parent_id,
                           replacement=head.snapshot_id)
            elif head.job is not None:
                if not _acts_for_job(session, principal, head.job):
                    raise domain_errors.ForbiddenError(
                        f"job {head.job!r} was registered by another token", job=head.job)
                barriers_service.commit(session, ctx, head.job, name, barrier=barrier,
                                        snapshot_id=head.snapshot_id)
            else:
                barriers_service.report_root(session, ctx, name, snapshot_id=head.snapshot_id,
                                             barrier=barrier)
        if changes.removed_snapshots:
            _expire(session, ctx, name, changes.removed_snapshots)
            # No live session serves a removed snapshot (its lease would have refused the
            # expiration), and no view serves it again: its cut files go.
            staged.removed_cut_files = repo.take_cut_files(
                session, str(staged.metadata.table_uuid), changes.removed_snapshots)
    except domain_errors.MetaServiceError as exc:
        logger.info("catalog_commit_refused", extra={"table": str(name), "code": exc.code})
        raise RefusedError.from_domain(exc, commit=True) from exc
    except RefusedError as exc:
        logger.info("catalog_commit_refused", extra={"table": str(name), "code": exc.code})
        raise


def _check_derived_update(session: Session, row: TableRow, name: TableName,
                          changes: CommitChanges, principal: Principal) -> None:
    """A table a running job writes changes only through that job's owner (its barrier
    commits, and metadata changes that add no snapshot) or an admin's maintenance (SPEC §11,
    Trust)."""
    job = row.writer_job
    assert job is not None
    if not _acts_for_job(session, principal, job):
        raise not_table_owner(
            f"{name} is written by running job {job!r}: only the token that registered it "
            "(or an admin's maintenance) changes it", table=str(name), job=job)
    if changes.side_snapshots:
        raise domain_errors.TableHasWriterError(
            f"{name} is written by running job {job!r}: only its barrier commits add snapshots "
            f"(snapshot(s) {changes.side_snapshots} are not on main)",
            table=str(name), writer=job)


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


def fill_identities(database: Database, catalog: CatalogSite) -> int:
    """Give rows older than revision 0010 their table-uuid and location key (read from their
    metadata files outside any transaction); answers how many were filled."""
    with database.transaction(write=False) as session:
        rows = [(r.namespace, r.name, r.version, r.metadata_location)
                for r in repo.pointers_without_identity(session)]
    filled = 0
    for namespace, name, version, location in rows:
        try:
            metadata = read_metadata(catalog, location)
            key = catalog.warehouse.key(metadata.location, "table location")
        except Exception:  # noqa: BLE001 - left as it is; logged
            logger.warning("catalog_identity_unreadable", extra={"location": location})
            continue
        with database.transaction(write=True) as session:
            repo.set_identity(session, namespace, name, version=version,
                              table_uuid=str(metadata.table_uuid), location=key)
        filled += 1
    return filled
