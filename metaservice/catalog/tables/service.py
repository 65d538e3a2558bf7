"""The catalog's tables: list, load (at the head, or at a read session's cut), exists, create,
register, drop and rename.

Create, register and drop touch files first, outside any transaction, then run one write
transaction that re-checks what the read saw (docs/contract.md#no-io-under-a-write-lock: no file I/O
under a database write lock). Commits are ``commits.py``.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from metaservice import errors as domain_errors
from metaservice.auth.policy import Role
from metaservice.auth.service import Principal
from metaservice.catalog import idempotency, pages
from metaservice.catalog.errors import (
    METADATA_TOO_LARGE,
    TABLE_IN_USE,
    AlreadyExistsError,
    BadRequestError,
    CommitFailedError,
    NoSuchTableError,
    RefusedError,
    not_table_owner,
)
from metaservice.catalog.namespaces.service import NAMESPACE_LOCATION, namespace_row
from metaservice.catalog.read_sessions import consistent_warehouses
from metaservice.catalog.read_sessions import service as read_sessions
from metaservice.catalog.requests import CreateTableRequest
from metaservice.catalog.site import (
    CatalogSite,
    existing_namespace_name,
    existing_table_namespace,
    namespace_name,
    one_more,
    table_name,
)
from metaservice.catalog.storage.warehouse import (
    MetadataFileError,
    MetadataTooLargeError,
    location_segment,
)
from metaservice.catalog.tables import repository as repo
from metaservice.catalog.tables import validation
from metaservice.catalog.tables.claims import claim_table_locations
from metaservice.catalog.tables.owners import acts_for_job, refuse_planted
from metaservice.catalog.tables.purges import PendingPurge, PurgeWorker
from metaservice.context import ServiceContext
from metaservice.db.models import IcebergTableRow
from metaservice.db.session import Database
from metaservice.names import TableName, dotted_namespace
from metaservice.repositories import tables as tables_repo

logger = logging.getLogger(__name__)

PARQUET_CODEC = "zstd"


@dataclass
class LoadedTable:
    """A table answer: its metadata as JSON (``model_dump_json``), the metadata file it comes
    from (None for a staged create), and which snapshots it holds."""

    metadata_json: bytes
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
    namespace_row(session, name)
    return pages.next_token(repo.list_tables(session, name, wanted.after, one_more(wanted)),
                            wanted)


def _pointer(session: Session, namespace: str, table: str) -> IcebergTableRow:
    pointer = repo.get_pointer(session, namespace, table)
    if pointer is None:
        raise NoSuchTableError(f"Table does not exist: {dotted_namespace(namespace, table)}")
    return pointer


def _metadata_location(session: Session | Connection, namespace: str, table: str) -> str:
    """The metadata file the table's pointer names (``_pointer``, reading only that)."""
    location = repo.pointer_location(session, namespace, table)
    if location is None:
        raise NoSuchTableError(f"Table does not exist: {dotted_namespace(namespace, table)}")
    return location


def current_metadata_location(session: Session | Connection, namespace: str, table: str) -> str:
    """The metadata file the table's pointer names now.

    Raises:
        NoSuchTableError: no such table.
    """
    return _metadata_location(session, namespace, table)


def read_metadata(catalog: CatalogSite, location: str) -> TableMetadata:
    """A table's own metadata file (its pointer names it)."""
    return catalog.warehouse.read(location)


def loaded(catalog: CatalogSite, location: str, snapshots: str = "all") -> LoadedTable:
    """The answer of the metadata file at ``location``: with all snapshots, its JSON as the
    warehouse caches it (serialised once per file)."""
    if snapshots == "all":
        return LoadedTable(catalog.warehouse.metadata_json(location), location)
    metadata = _with_snapshots(read_metadata(catalog, location), snapshots)
    return LoadedTable(_json(metadata), location, snapshots)


def _json(metadata: TableMetadata) -> bytes:
    return metadata.model_dump_json().encode()


def load_table(database: Database, catalog: CatalogSite, levels: Sequence[str], table: str,
               snapshots: str = "all",
               if_none_match: str | None = None) -> LoadedTable | NotModified:
    """The table's current metadata, or ``NotModified`` (its file left unread) when
    ``if_none_match`` names it: the pointer lookup, then (once the file is cached) its
    JSON."""
    namespace = existing_table_namespace(levels, table)
    with database.reading() as connection:
        location = _metadata_location(connection, namespace, table)
    tag = etag(location, snapshots)
    if etag_matches(if_none_match, tag):
        return NotModified(tag)
    return loaded(catalog, location, snapshots)


def load_table_in_session(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                          prefix: str, principal: Principal, levels: Sequence[str], table: str,
                          snapshots: str = "all") -> LoadedTable:
    """The table as the read session ``prefix`` serves it: the table at the session's cut
    (docs/contract.md#a-table-at-a-cut). The cut is fixed in one transaction, the files are read and
    written outside any, and the cut file is recorded in a second one before it is written. A cut
    this process served before is answered from its cut file's cached JSON.

    A repeat load (the table's cut fixed, the session not due a renewal) whose cut file this
    process cached is one read statement (``read_sessions/service.fixed_cut``) and those bytes. It
    needs not check the file's row: the JSON is cached only once the file is written, after
    its row committed, and the row goes only with its snapshot, which the live session's lease
    keeps, or with the table, whose end takes the session's cut with it."""
    namespace = existing_table_namespace(levels, table)
    name = table_name(catalog, namespace, table)
    warehouse = catalog.warehouse
    if snapshots == "all":
        with database.reading() as connection:
            fixed = read_sessions.fixed_cut(connection, ctx, prefix, name, principal)
        remembered = None if fixed is None else warehouse.remembered_cut_location(
            fixed[1], fixed[0].snapshot_id, fixed[0].barrier, fixed[0].kind)
        if remembered is not None:
            cached = warehouse.metadata_cache.get(remembered)
            if cached is not None:
                return LoadedTable(cached, remembered)
    with database.transaction(write=True) as session:
        _metadata_location(session, namespace, table)
        cut = read_sessions.cut_for(session, ctx, prefix, name, principal)
        # The pointer is read again after the cut: the commit that recorded the cut's snapshot
        # swapped the pointer in the same transaction, so this read sees metadata that has it
        # (read before, on PostgreSQL, it could predate a commit the cut already saw).
        head_location = _metadata_location(session, namespace, table)
        # A cut file goes only after its row: while the row is recorded, a file this process
        # wrote (or found) is there.
        location = warehouse.remembered_cut_location(head_location, cut.snapshot_id,
                                                     cut.barrier, cut.kind)
        recorded = location is not None and repo.cut_file_recorded(session, location)
    if location is not None and recorded and snapshots == "all":
        cached = warehouse.metadata_cache.get(location)
        if cached is not None:
            return LoadedTable(cached, location)
    served = consistent_warehouses.metadata_at(read_metadata(catalog, head_location),
                                               cut.snapshot_id, cut.barrier, cut.kind)
    if served is None:
        raise domain_errors.SnapshotExpiredError(
            f"snapshot {cut.snapshot_id} of {name} at barrier {cut.barrier} is no longer in "
            "the table's metadata (expired outside MetaService)",
            snapshots=[{"table": str(name), "snapshot_id": cut.snapshot_id}])
    content = _json(served)  # serialised once: named after, written, and answered
    # Engines may read the file at metadata-location rather than the answer: it holds the cut.
    location = warehouse.cut_location(head_location, cut.snapshot_id, cut.barrier, cut.kind,
                                      content)
    # Recorded before it is written: a file on disk whose row never committed is only left
    # behind, a row whose file was never written deletes nothing. The session's lease keeps the
    # snapshot (and so the row) from being expired in between.
    if not recorded:
        with database.transaction(write=False) as session:
            recorded = repo.cut_file_recorded(session, location)
    if not recorded:
        with database.transaction(write=True) as session:
            repo.record_cut_file(session, location, str(served.table_uuid), cut.snapshot_id,
                                 ctx.clock.now_ms())
    warehouse.write_shared(content, location)
    if snapshots == "all":
        return LoadedTable(content, location)
    return LoadedTable(_json(_with_snapshots(served, snapshots)), location, snapshots)


def _with_snapshots(metadata: TableMetadata, snapshots: str) -> TableMetadata:
    """``snapshots=refs`` leaves out the snapshots no ref points at."""
    if snapshots != "refs":
        return metadata
    referenced = {ref.snapshot_id for ref in metadata.refs.values()}
    return metadata.model_copy(update={
        "snapshots": [s for s in metadata.snapshots if s.snapshot_id in referenced]})


def table_exists(session: Session, levels: Sequence[str], table: str) -> None:
    _pointer(session, existing_table_namespace(levels, table), table)


def _default_location(session: Session, catalog: CatalogSite, namespace: str,
                      namespace_location: str, table: str) -> str:
    """Where a table created without a location lies: ``<namespace location>/<table>``, unless
    another table (one renamed away from this name, say) claims that place; then beside it,
    with a random suffix, since no two tables' files ever share a location."""
    if namespace_location:
        location = f"{catalog.warehouse.confine(namespace_location)}/{location_segment(table)}"
    else:
        location = catalog.warehouse.default_table_location(namespace, table)
    if repo.claims_overlapping(session, catalog.warehouse.key(location), ""):
        location = f"{location}-{uuid.uuid4().hex[:8]}"
    return location


def create_table(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                 levels: Sequence[str], request: CreateTableRequest, principal: Principal,
                 guard: idempotency.Guard | None = None) -> LoadedTable:
    """Create a table (its first metadata file and its pointer), or with ``stage-create`` only
    answer the metadata it would have: the table is created by the commit that asserts it does
    not exist yet."""
    namespace = namespace_name(levels)
    name = table_name(catalog, namespace, request.name)
    with database.transaction(write=False) as session:
        row = namespace_row(session, namespace)
        namespace_location = str(row.properties.get(NAMESPACE_LOCATION, ""))
        if repo.get_pointer(session, namespace, name.table) is not None:
            raise AlreadyExistsError(f"Table already exists: {dotted_namespace(namespace, name.table)}")
        if request.location:
            location = catalog.warehouse.confine(request.location, "table location")
        else:
            location = _default_location(session, catalog, namespace, namespace_location,
                                         name.table)
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
    validation.writable_format(metadata)
    keys = catalog.warehouse.confine_table(metadata)
    if request.stage_create:
        return LoadedTable(_json(metadata), None)
    metadata_location = catalog.warehouse.new_metadata_location(metadata, 0)
    catalog.warehouse.write(metadata, metadata_location)
    with database.transaction(write=True) as session:
        if guard is not None:
            guard.claim(session)
        repo.lock_locations(session)
        namespace_row(session, namespace)
        if repo.get_pointer(session, namespace, name.table) is not None:
            raise AlreadyExistsError(f"Table already exists: {dotted_namespace(namespace, name.table)}")
        refuse_planted(session, name, principal)
        repo.refuse_view_name(session, namespace, name.table)
        claim_table_locations(session, name, keys, str(metadata.table_uuid), replaces=False,
                              now_ms=ctx.clock.now_ms())
        if not repo.insert_pointer(session, namespace, name.table, metadata_location,
                                   ctx.clock.now_ms(), table_uuid=str(metadata.table_uuid),
                                   location=keys[0]):
            raise AlreadyExistsError(f"Table already exists: {dotted_namespace(namespace, name.table)}")
        if guard is not None:
            guard.finish(session, {"metadata-location": metadata_location})
    logger.info("catalog_table_created", extra={"table": str(name)})
    return loaded(catalog, metadata_location)


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
        namespace_row(session, namespace)
    try:
        metadata = catalog.warehouse.read(metadata_location)
    except MetadataTooLargeError as exc:
        raise RefusedError(METADATA_TOO_LARGE, f"cannot register {metadata_location}: {exc}",
                           {"limit": catalog.warehouse.max_metadata_bytes}) from None
    except MetadataFileError as exc:
        raise BadRequestError(f"cannot register {metadata_location}: {exc}") from None
    validation.table_metadata(metadata, catalog.warehouse.root)
    keys = catalog.warehouse.confine_table(metadata)
    now = ctx.clock.now_ms()
    with database.transaction(write=True) as session:
        if guard is not None:
            guard.claim(session)
        repo.lock_locations(session)
        namespace_row(session, namespace)
        existing = repo.get_pointer(session, namespace, qualified.table)
        if existing is not None:
            if not overwrite:
                raise AlreadyExistsError(f"Table already exists: {dotted_namespace(namespace, qualified.table)}")
            refuse_planted(session, qualified, principal)
            if principal.role != Role.admin:
                raise domain_errors.ForbiddenError(
                    f"registering over {qualified} ends that table, as a drop does: it needs "
                    "the admin role", table=str(qualified))
            end_table(session, qualified, principal, existing)
        refuse_planted(session, qualified, principal)
        repo.refuse_view_name(session, namespace, qualified.table)
        # A table replaced above released its uuid's claims, not its pointer row: the row is
        # replaced in place, so its uuid may be the one registered.
        claim_table_locations(session, qualified, keys, str(metadata.table_uuid),
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
            raise AlreadyExistsError(f"Table already exists: {dotted_namespace(namespace, qualified.table)}")
        if guard is not None:
            guard.finish(session, {"metadata-location": metadata_location})
    logger.info("catalog_table_registered", extra={"table": str(qualified),
                                                   "location": metadata_location})
    return loaded(catalog, metadata_location)


@dataclass(frozen=True)
class EndedTable:
    """What is left of a table once it ended: its cut files, and the locations it claimed
    (a purge deletes files under them only)."""

    cut_files: list[str]
    claims: list[str]


def end_table(session: Session, name: TableName, principal: Principal,
               pointer: IcebergTableRow, *, keep_claims: bool = False) -> EndedTable:
    """A drop's (and an overwriting register's) end of a table in MetaService: its barrier
    history, leases, read-session entries, rollback plans, cut files and location claims go
    (docs/contract.md#files-stay-inside-the-warehouse); ``keep_claims``: the claims stay, held by
    the purge recorded with the drop until it finished. Refused while a running job reads or
    writes it."""
    row = tables_repo.find_table(session, name, for_update=True)
    if row is not None:
        jobs = repo.running_jobs_of(session, row.id)
        if jobs:
            if row.writer_job is not None and not acts_for_job(session, principal,
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
    cut_files = repo.take_cut_files(session, pointer.table_uuid)
    if keep_claims:
        return EndedTable(cut_files, repo.claims_of(session, pointer.table_uuid))
    return EndedTable(cut_files, repo.release_claims(session, pointer.table_uuid))


@dataclass(frozen=True)
class DroppedTable:
    """What a purge deletes once the drop committed: the purge recorded with the drop (None
    without one: the drop asked for none, or the table's locations are unknown), and the cut
    files its read sessions served."""

    purge: PendingPurge | None
    cut_files: list[str]


def drop_table(database: Database, catalog: CatalogSite, levels: Sequence[str], table: str,
               principal: Principal, guard: idempotency.Guard | None = None, *,
               purges: PurgeWorker | None = None) -> DroppedTable:
    """Drop the pointer and end the table (its history, leases, cut files, claims); answers
    what a purge deletes. The pointer goes only if it is still the one read (a rename moves
    its version), so a drop never ends another table that took the name meanwhile. With
    ``purges`` (``purgeRequested``) the purge is recorded in the drop's transaction, held by
    that worker, and the table's claims stay until it finished (``purges.py``)."""
    namespace = namespace_name(levels)
    name = table_name(catalog, namespace, table)
    version, metadata_location, table_uuid = _read_pointer(database, namespace, table)
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
        ended = end_table(session, name, principal, dropped, keep_claims=purges is not None)
        purge = None
        if purges is not None and dropped.table_uuid is not None and (ended.claims or claims):
            purge = PendingPurge(dropped.table_uuid, metadata_location, ended.claims or claims)
            if not ended.claims:  # a row older than its claims: the purge holds them now
                repo.add_claims(session, purge.table_uuid, claims, purges.clock.now_ms())
            repo.record_purge(session, purge.table_uuid, metadata_location, purge.claims,
                              now_ms=purges.clock.now_ms(), claimed_by=purges.name,
                              claim_ms=purges.claim_ms)
        if guard is not None:
            guard.finish(session, {})
    logger.info("catalog_table_dropped", extra={"namespace": namespace, "table": table})
    return DroppedTable(purge, ended.cut_files)


def rename_table(session: Session, ctx: ServiceContext, catalog: CatalogSite,
                 principal: Principal, source_levels: Sequence[str], source_table: str,
                 target_levels: Sequence[str], target_table: str) -> None:
    """Rename the pointer, and MetaService's record of the table with it (its barriers follow
    it). A table a running job reads or writes keeps its name: the job knows it by that name."""
    source = table_name(catalog, namespace_name(source_levels), source_table)
    target = table_name(catalog, namespace_name(target_levels), target_table)
    _pointer(session, source.database, source.table)
    namespace_row(session, target.database)
    if repo.get_pointer(session, target.database, target.table) is not None:
        raise AlreadyExistsError(f"Cannot rename {dotted_namespace(source.database, source.table)} to "
                                 f"{dotted_namespace(target.database, target.table)}. Table already exists")
    refuse_planted(session, target, principal)
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
        raise NoSuchTableError(f"Table does not exist: {dotted_namespace(source.database, source.table)}")


def _read_pointer(database: Database, namespace: str,
                  table: str) -> tuple[int, str, str | None]:
    """The table's pointer, as a drop and an unregister read it: its version, metadata file
    and identity (None for a row older than identities)."""
    with database.transaction(write=False) as session:
        pointer = _pointer(session, namespace, table)
        return pointer.version, pointer.metadata_location, pointer.table_uuid


def unregister_table(database: Database, catalog: CatalogSite, levels: Sequence[str],
                     table: str, principal: Principal,
                     guard: idempotency.Guard | None = None) -> LoadedTable:
    """Forget the table as a drop does (refused where a drop is: a table a running job reads
    or writes), deleting no file: answers its last metadata, read before the pointer goes
    (``registerTable``'s opposite; the files stay for another catalog to register). The
    pointer goes only if it still names that file, so the answer holds every commit."""
    namespace = namespace_name(levels)
    name = table_name(catalog, namespace, table)
    version, metadata_location, table_uuid = _read_pointer(database, namespace, table)
    last = loaded(catalog, metadata_location)
    if table_uuid is None:  # a row older than its identity: the file tells
        table_uuid = str(read_metadata(catalog, metadata_location).table_uuid)
    with database.transaction(write=True) as session:
        if guard is not None:
            guard.claim(session)
        gone = repo.delete_pointer(session, namespace, table, expected_version=version)
        if gone is None:
            raise CommitFailedError(f"{name} changed concurrently, or is gone; retry")
        if gone.table_uuid is None:
            gone.table_uuid = table_uuid
        end_table(session, name, principal, gone)
        if guard is not None:
            guard.finish(session, {"metadata-location": metadata_location})
    logger.info("catalog_table_unregistered",
                extra={"namespace": namespace, "table": table, "location": metadata_location})
    return last
