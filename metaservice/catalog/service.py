"""The catalog's rules: namespaces, tables, and commits that obey MetaService (SPEC §11).

A commit is applied in four steps, the last two inside the request's database transaction:

1. *stage*: read the current metadata, validate the client's requirements and apply its updates
   with pyiceberg's own code (``requirement.validate``, ``update_table_metadata``);
2. *write* the new metadata file to the warehouse (a crash after this leaves an unreferenced
   file only);
3. *swap* the table's pointer by compare-and-swap on its version (tables in name order, so
   two transactions over the same tables never deadlock): a lost race is a 409
   ``CommitFailedException`` and the client refreshes and retries;
4. apply MetaService's rules to what the commit changes (``changes.py``) by calling the barrier,
   expiration and rollback services in the same transaction: a refusal rolls the pointer back
   with it.
"""

from __future__ import annotations

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
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import AssertCreate, update_table_metadata
from sqlalchemy.orm import Session

from metaservice import errors as domain_errors
from metaservice.auth.service import Principal
from metaservice.barriers import service as barriers_service
from metaservice.catalog import read_sessions, validation, views
from metaservice.catalog import repository as repo
from metaservice.catalog.changes import REPLACE, CommitChanges, commit_changes
from metaservice.catalog.errors import (
    AlreadyExistsError,
    BadRequestError,
    CommitFailedError,
    CommitRefusedError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    UnprocessableEntityError,
)
from metaservice.catalog.storage import Warehouse
from metaservice.context import ServiceContext
from metaservice.db.models import JobRow
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


def create_namespace(session: Session, ctx: ServiceContext, levels: Sequence[str],
                     properties: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    name = namespace_name(levels)
    if not repo.create_namespace(session, name, dict(properties), ctx.clock.now_ms()):
        raise AlreadyExistsError(f"namespace already exists: {name}")
    logger.info("catalog_namespace_created", extra={"namespace": name})
    return [name], dict(properties)


def load_namespace(session: Session, levels: Sequence[str]) -> dict[str, str]:
    return dict(_namespace(session, existing_namespace_name(levels)).properties)


def drop_namespace(session: Session, levels: Sequence[str]) -> None:
    name = namespace_name(levels)
    _namespace(session, name)
    if repo.count_tables(session, name):
        raise NamespaceNotEmptyError(f"namespace {name} is not empty")
    repo.drop_namespace(session, name)


def update_namespace_properties(session: Session, levels: Sequence[str], removals: list[str],
                                updates: dict[str, str]) -> dict[str, list[str]]:
    name = namespace_name(levels)
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


def _pointer(session: Session, namespace: str, table: str):  # type: ignore[no-untyped-def]
    pointer = repo.get_pointer(session, namespace, table)
    if pointer is None:
        raise NoSuchTableError(f"table does not exist: {namespace}.{table}")
    return pointer


def load_table(session: Session, catalog: CatalogSite, levels: Sequence[str], table: str,
               snapshots: str = "all") -> LoadedTable:
    namespace = _existing_table_namespace(levels, table)
    pointer = _pointer(session, namespace, table)
    metadata = catalog.warehouse.read(pointer.metadata_location)
    return LoadedTable(_with_snapshots(metadata, snapshots), pointer.metadata_location)


def load_table_in_view(session: Session, ctx: ServiceContext, catalog: CatalogSite,
                       prefix: str, principal: Principal, levels: Sequence[str], table: str,
                       snapshots: str = "all") -> LoadedTable:
    """The table as the read session ``prefix`` serves it: its metadata at the session's cut
    (SPEC §12)."""
    namespace = _existing_table_namespace(levels, table)
    _pointer(session, namespace, table)
    name = table_name(catalog, namespace, table)
    cut = read_sessions.cut_for(session, ctx, prefix, name, principal)
    # The pointer is read again after the cut: the commit that recorded the cut's snapshot
    # swapped the pointer in the same transaction, so this read sees metadata that has it (read
    # before, on PostgreSQL, it could predate a commit the cut already saw).
    pointer = _pointer(session, namespace, table)
    served = views.metadata_at(catalog.warehouse.read(pointer.metadata_location),
                               cut.snapshot_id, cut.barrier, cut.kind)
    if served is None:
        raise domain_errors.SnapshotExpiredError(
            f"snapshot {cut.snapshot_id} of {name} at barrier {cut.barrier} is no longer in "
            "the table's metadata (expired outside MetaService)",
            snapshots=[{"table": str(name), "snapshot_id": cut.snapshot_id}])
    # Engines may read the file at metadata-location rather than the answer: it holds the cut.
    location = catalog.warehouse.cut_location(pointer.metadata_location, cut.snapshot_id,
                                              cut.barrier, cut.kind, served)
    # Recorded before it is written: a file on disk whose row never committed is only left
    # behind, a row whose file was never written deletes nothing.
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


def create_table(session: Session, ctx: ServiceContext, catalog: CatalogSite,
                 levels: Sequence[str], request: Any) -> LoadedTable:
    """Create a table (its first metadata file and its pointer), or with ``stage-create`` only
    answer the metadata it would have: the table is created by the commit that asserts it does
    not exist yet."""
    from pyiceberg.table import TableProperties

    namespace = namespace_name(levels)
    name = table_name(catalog, namespace, request.name)
    namespace_row = _namespace(session, namespace)
    if repo.get_pointer(session, namespace, name.table) is not None:
        raise AlreadyExistsError(f"table already exists: {namespace}.{name.table}")
    namespace_location = str(namespace_row.properties.get("location", "")).rstrip("/")
    if request.location:
        location = request.location
    elif namespace_location:
        location = f"{namespace_location}/{name.table}"
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
    except validation.INVALID_METADATA as exc:
        raise BadRequestError(f"invalid table: {validation.describe(exc)}") from exc
    validation.table_metadata(metadata, catalog.warehouse.root)
    if request.stage_create:
        return LoadedTable(metadata, None)
    metadata_location = catalog.warehouse.new_metadata_location(metadata, 0)
    catalog.warehouse.write(metadata, metadata_location)
    if not repo.insert_pointer(session, namespace, name.table, metadata_location,
                               ctx.clock.now_ms()):
        raise AlreadyExistsError(f"table already exists: {namespace}.{name.table}")
    logger.info("catalog_table_created", extra={"table": str(name)})
    return LoadedTable(metadata, metadata_location)


def register_table(session: Session, ctx: ServiceContext, catalog: CatalogSite,
                   levels: Sequence[str], name: str, metadata_location: str,
                   overwrite: bool) -> LoadedTable:
    namespace = namespace_name(levels)
    qualified = table_name(catalog, namespace, name)
    _namespace(session, namespace)
    try:
        metadata = catalog.warehouse.read(metadata_location)
    except validation.UNREADABLE_METADATA_FILE as exc:
        raise BadRequestError(f"cannot read metadata file {metadata_location}: "
                              f"{validation.describe(exc)}") from exc
    validation.table_metadata(metadata, catalog.warehouse.root)
    now = ctx.clock.now_ms()
    existing = repo.get_pointer(session, namespace, qualified.table)
    if existing is not None:
        if not overwrite:
            raise AlreadyExistsError(f"table already exists: {namespace}.{qualified.table}")
        if not repo.swap_pointer(session, namespace, qualified.table,
                                 expected_version=existing.version,
                                 metadata_location=metadata_location, now_ms=now):
            raise CommitFailedError(f"{qualified} changed concurrently; retry")
    elif not repo.insert_pointer(session, namespace, qualified.table, metadata_location, now):
        raise AlreadyExistsError(f"table already exists: {namespace}.{qualified.table}")
    return LoadedTable(metadata, metadata_location)


@dataclass(frozen=True)
class DroppedTable:
    """What a purge deletes once the drop committed: the files of the table's last metadata
    file, and the cut files its views served."""

    metadata_location: str
    cut_files: list[str]


def drop_table(session: Session, catalog: CatalogSite, levels: Sequence[str],
               table: str) -> DroppedTable:
    """Drop the pointer and forget the table's cut files; answers what a purge deletes."""
    namespace = namespace_name(levels)
    location = repo.delete_pointer(session, namespace, table)
    if location is None:
        raise NoSuchTableError(f"table does not exist: {namespace}.{table}")
    try:
        table_uuid = str(catalog.warehouse.read(location).table_uuid)
    except Exception:  # noqa: BLE001 - an unreadable metadata file does not stop a drop
        logger.warning("catalog_drop_metadata_unreadable", extra={"location": location})
        cut_files = []
    else:
        cut_files = repo.take_cut_files(session, table_uuid)
    logger.info("catalog_table_dropped", extra={"namespace": namespace, "table": table})
    return DroppedTable(location, cut_files)


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
            raise CommitRefusedError(
                domain_errors.TableHasWriterError.code,
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
    # Cut files of the snapshots the commit removed: deleted once it committed.
    removed_cut_files: list[str] = field(default_factory=list)


def parse_commit(body: Any, *, namespace: str | None = None,
                 table: str | None = None) -> CommitTableRequest:
    """A commit request; a single-table commit may leave out the identifier its path gives."""
    if isinstance(body, dict) and body.get("identifier") is None and table is not None:
        body = {**body, "identifier": {"namespace": [namespace], "name": table}}
    return validation.commit_request(body)


def _stage(session: Session, catalog: CatalogSite, namespace: str, table: str,
           request: CommitTableRequest) -> StagedCommit:
    name = table_name(catalog, namespace, table)
    pointer = repo.get_pointer(session, namespace, table)
    creating = any(isinstance(r, AssertCreate) for r in request.requirements)
    if pointer is None and not creating:
        raise NoSuchTableError(f"table does not exist: {namespace}.{table}")
    if pointer is None:
        _namespace(session, namespace)
    base = catalog.warehouse.read(pointer.metadata_location) if pointer is not None else None
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
    except validation.INVALID_METADATA as exc:
        raise BadRequestError(f"invalid update of {name}: {validation.describe(exc)}") from exc
    validation.table_update(base, metadata, catalog.warehouse.root)
    version = (MetastoreCatalog._parse_metadata_version(pointer.metadata_location) + 1
               if pointer is not None else 0)
    location = catalog.warehouse.new_metadata_location(metadata, version)
    catalog.warehouse.write(metadata, location)
    return StagedCommit(name, base, pointer.version if pointer is not None else None, metadata,
                   location, True)


def _swap(session: Session, ctx: ServiceContext, staged: StagedCommit) -> None:
    name, now = staged.name, ctx.clock.now_ms()
    if staged.base_version is None:
        if not repo.insert_pointer(session, name.database, name.table,
                                   staged.metadata_location, now):
            raise CommitFailedError(f"table already exists: {name.database}.{name.table}")
    elif not repo.swap_pointer(session, name.database, name.table,
                               expected_version=staged.base_version,
                               metadata_location=staged.metadata_location, now_ms=now):
        raise CommitFailedError(f"{name} was changed by a concurrent commit; refresh and retry")


def commit_tables(session: Session, ctx: ServiceContext, catalog: CatalogSite,
                  requests: Sequence[tuple[str, str, CommitTableRequest]],
                  *, actor: str | None) -> list[StagedCommit]:
    """Commit to one or more tables, all or none (``(namespace, table, request)`` each).
    ``actor`` is the writer token's name when job ownership must be checked, else None."""
    seen: set[tuple[str, str]] = set()
    for namespace, table, _ in requests:
        if (namespace, table) in seen:
            raise BadRequestError(f"table {namespace}.{table} appears twice in one transaction")
        seen.add((namespace, table))
    staged = [_stage(session, catalog, namespace, table, request)
              for namespace, table, request in requests]
    for one in sorted(staged, key=lambda s: s.name):
        if one.changed:
            _swap(session, ctx, one)
    for one in staged:
        if one.changed:
            _apply_rules(session, ctx, one, commit_changes(one.base, one.metadata), actor=actor)
    for one in staged:
        if one.changed:
            logger.info("catalog_commit", extra={"table": str(one.name),
                                                 "location": one.metadata_location})
    return staged


def _apply_rules(session: Session, ctx: ServiceContext, staged: StagedCommit,
                 changes: CommitChanges, *, actor: str | None) -> None:
    """SPEC §11: what the commit changes must be allowed, and is recorded, here and now."""
    if not changes.matters:
        return
    name = staged.name
    try:
        if changes.moved_back_to is not None:
            _check_rollback(session, name, changes.moved_back_to)
        head = changes.new_head
        if head is not None:
            barrier = _barrier(head.barrier)
            if head.operation == REPLACE:
                _take_over(session, name, replaced=head.parent_id, replacement=head.snapshot_id)
            elif head.job is not None:
                _check_owner(session, head.job, actor)
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
        raise CommitRefusedError.from_domain(exc) from exc


def _barrier(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise BadRequestError(
            f"metaservice {domain_errors.InvalidRequestError.code}: snapshot property "
            f"metaservice.barrier must be an integer, not {value[:50]!r}") from None


def _check_owner(session: Session, job: str, actor: str | None) -> None:
    if actor is None:
        return
    owner = session.get(JobRow, job)
    if owner is not None and owner.owner is not None and owner.owner != actor:
        raise CommitRefusedError("forbidden", f"job {job!r} was registered by another token",
                                 {"job": job})


def _take_over(session: Session, name: TableName, *, replaced: int | None,
               replacement: int) -> None:
    row = tables_repo.find_table(session, name, for_update=True)
    if row is None or replaced is None:
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


def _check_rollback(session: Session, name: TableName, snapshot_id: int) -> None:
    row = tables_repo.find_table(session, name)
    if row is None:
        return  # no barrier of this table is recorded: moving main back breaks nothing
    plan_id = rollback_repo.fences_on(session, [row.id]).get(row.id)
    plan = rollback_repo.get_plan(session, plan_id) if plan_id is not None else None
    if plan is not None:
        for entry in plan.document.get("tables", []):
            target = entry.get("target")
            if (entry.get("table") == str(name) and target is not None
                    and int(target.get("snapshot_id")) == snapshot_id):
                return
    raise domain_errors.RollbackPlanNotAppliedError(
        f"main of {name} may move back to snapshot {snapshot_id} only under an applied "
        "rollback plan that targets it", table=str(name), snapshot_id=snapshot_id)
