"""The catalog's Iceberg views (the SQL objects of the Iceberg view specification): list, create,
load, commit (replace), rename, drop, exists and register.

A view is a pointer in the database (``catalog_views``) to its current metadata file in the
warehouse, as a table is. The same trust rules hold (docs/contract.md#trust):

- every file the server writes or reads for a view lies inside the warehouse (the view's
  location, its ``write.metadata.path``, a registered metadata file), and is read only if it is
  a regular file under the size cap, within the time limit;
- files are read and written outside any transaction; then one write transaction re-checks what
  the read saw and swaps the pointer by compare-and-swap on its version: a lost race (or a
  requirement that no longer holds) is the one 409 ``CommitFailedException``;
- a view and a table never share a name in one namespace (``repository.py``);
- a register of a file of a view the catalog has already (same view-uuid) is refused;
- every other bad request is a 4xx in the Iceberg error model.

What a create or a commit makes of the metadata is ``rules.py`` (pure).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pyiceberg.view.metadata import ViewMetadata
from sqlalchemy.orm import Session

from metaservice.catalog import idempotency, pages
from metaservice.catalog.errors import (
    METADATA_TOO_LARGE,
    AlreadyExistsError,
    BadRequestError,
    CommitFailedError,
    IcebergError,
    NoSuchNamespaceError,
    RefusedError,
)
from metaservice.catalog.namespaces import repository as namespaces_repo
from metaservice.catalog.namespaces.service import NAMESPACE_LOCATION
from metaservice.catalog.requests import CommitViewRequest, CreateViewRequest
from metaservice.catalog.site import (
    CatalogSite,
    existing_namespace_name,
    namespace_name,
    table_name,
)
from metaservice.catalog.storage.warehouse import (
    MetadataFileError,
    MetadataTooLargeError,
    Warehouse,
    _Recent,
    location_segment,
)
from metaservice.catalog.tables import repository as repo
from metaservice.catalog.tables.claims import claim_locations
from metaservice.catalog.tables.service import NotModified, etag, etag_matches
from metaservice.catalog.views import repository as view_repo
from metaservice.catalog.views import rules as sql_views
from metaservice.context import ServiceContext
from metaservice.db.models import IcebergViewRow
from metaservice.db.session import Database
from metaservice.names import check_namespace, check_part, dotted_namespace

logger = logging.getLogger(__name__)

VIEW_ALREADY_REGISTERED = "view_already_registered"


class NoSuchViewError(IcebergError):
    status_code = 404
    type = "NoSuchViewException"


@dataclass(frozen=True)
class LoadedView:
    metadata: ViewMetadata
    metadata_location: str

    @property
    def etag(self) -> str:
        return view_etag(self.metadata_location)


def view_etag(metadata_location: str) -> str:
    """A view answer's ``ETag``: its metadata file never changes once written, so its location
    names the answer (never a table answer's tag: ``view:`` comes first)."""
    return etag(metadata_location, "view")


# -- files -----------------------------------------------------------------------------------

# Metadata files are written once and never changed: those read are kept by location.
_files: _Recent[tuple[str, str], ViewMetadata] = _Recent()


def read_file(warehouse: Warehouse, location: str) -> ViewMetadata:
    """The view metadata file at ``location``, inside the warehouse.

    Raises:
        RefusedError: 400 ``location_outside_warehouse``.
        MetadataFileError: not a regular file, too large, or not view metadata.
        ServiceUnavailableError: not read in time.
    """
    warehouse.key(location, "view metadata file")
    cached = _files.get((warehouse.root, location))
    if cached is not None:
        return cached
    content = warehouse.read_bytes(location, "view metadata file")  # inflated, capped
    try:
        metadata = ViewMetadata.model_validate_json(content)
    except Exception as exc:  # noqa: BLE001 - any content that is not view metadata
        raise MetadataFileError(
            f"{location} is not Iceberg view metadata: {_reason(exc)}") from None
    _files.put((warehouse.root, location), metadata)
    return metadata


def write_file(warehouse: Warehouse, metadata: ViewMetadata, location: str) -> None:
    """Write a new view metadata file (never overwrites one)."""
    warehouse.key(location, "view metadata location")
    warehouse.write_new(location, metadata.model_dump_json().encode())
    _files.put((warehouse.root, location), metadata)


def _confine(warehouse: Warehouse, metadata: ViewMetadata) -> list[str]:
    """The keys of the view's location and location properties, once each lies inside the
    warehouse, as a table's must (``Warehouse.confine_table``)."""
    for name in sql_views.LOCATION_PROPERTIES:
        value = metadata.properties.get(name)
        if value is not None:
            warehouse.key(value, f"view property {name}")
    return warehouse.confine_table(metadata)  # type: ignore[arg-type]


def _claim(session: Session, view: str, keys: list[str], view_uuid: str, now_ms: int) -> None:
    """A view claims its locations as a table does: none lies inside another table's or
    view's, so no purge reaches its files (docs/contract.md#files-stay-inside-the-warehouse)."""
    repo.lock_locations(session)
    claim_locations(session, f"view {view}", keys, view_uuid, code=VIEW_ALREADY_REGISTERED,
                    status=409, now_ms=now_ms)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0] if exc.errors() else {"msg": str(exc), "loc": ()}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where}: {first['msg']}" if where else str(first["msg"])
    return str(exc)[:300] or type(exc).__name__


# -- names -----------------------------------------------------------------------------------


def _existing_view_namespace(levels: Sequence[str], view: str) -> str:
    """The namespace of a view a request names; a name this catalog cannot hold (NUL bytes
    included, which PostgreSQL cannot even compare) names no view (404)."""
    try:
        check_part(view)
        return check_namespace(levels)
    except ValueError:
        raise NoSuchViewError(
            f"View does not exist: {'.'.join([*levels, view])[:300]}") from None


def _view(session: Session, namespace: str, name: str) -> IcebergViewRow:
    row = view_repo.get_view(session, namespace, name)
    if row is None:
        raise NoSuchViewError(f"View does not exist: {dotted_namespace(namespace, name)}")
    return row


def _namespace(session: Session, name: str) -> dict[str, Any]:
    row = namespaces_repo.get_namespace(session, name)
    if row is None:
        raise NoSuchNamespaceError(f"Namespace does not exist: {dotted_namespace(name)}")
    return dict(row.properties)


def _refuse_taken(session: Session, namespace: str, name: str,
                  renaming: str | None = None) -> None:
    """409 when a table or a view has the name (that a view renamed from ``renaming`` would
    take), in the words of Iceberg's own catalogs."""
    taken_by = ("Table" if repo.get_pointer(session, namespace, name) is not None else
                "View" if view_repo.get_view(session, namespace, name) is not None else None)
    if taken_by is None:
        return
    why = " (a table and a view never share a name)" if taken_by == "Table" else ""
    if renaming is not None:
        raise AlreadyExistsError(f"Cannot rename {renaming} to {dotted_namespace(namespace, name)}. {taken_by} "
                                 f"already exists{why}")
    if taken_by == "Table":
        raise AlreadyExistsError(f"Table with same name already exists: {dotted_namespace(namespace, name)}{why}")
    raise AlreadyExistsError(f"View already exists: {dotted_namespace(namespace, name)}")


# -- routes ----------------------------------------------------------------------------------


def list_views(session: Session, levels: Sequence[str],
               wanted: pages.Page = pages.EVERYTHING) -> tuple[list[str], str | None]:
    """One page of a namespace's view names, and the next page's token."""
    namespace = existing_namespace_name(levels)
    _namespace(session, namespace)
    limit = None if wanted.size is None else wanted.size + 1
    return pages.next_token(view_repo.list_views(session, namespace, wanted.after, limit),
                            wanted)


def view_exists(session: Session, levels: Sequence[str], view: str) -> None:
    _view(session, _existing_view_namespace(levels, view), view)


def load_view(database: Database, catalog: CatalogSite, levels: Sequence[str],
              view: str, if_none_match: str | None = None) -> LoadedView | NotModified:
    """The view's current metadata, or ``NotModified`` (its file left unread) when
    ``if_none_match`` names its ``ETag``."""
    namespace = _existing_view_namespace(levels, view)
    with database.transaction(write=False) as session:
        location = _view(session, namespace, view).metadata_location
    tag = view_etag(location)
    if etag_matches(if_none_match, tag):
        return NotModified(tag)
    return LoadedView(read_file(catalog.warehouse, location), location)


def loaded(catalog: CatalogSite, location: str) -> LoadedView:
    """The answer of the view metadata file at ``location`` (an ``Idempotency-Key``'s
    replay)."""
    return LoadedView(read_file(catalog.warehouse, location), location)


def create_view(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                levels: Sequence[str], request: CreateViewRequest,
                guard: idempotency.Guard | None = None) -> LoadedView:
    """Create a view: its first metadata file, then its pointer."""
    namespace = namespace_name(levels)
    name = table_name(catalog, namespace, request.name).table
    with database.transaction(write=False) as session:
        namespace_location = str(_namespace(session, namespace).get(NAMESPACE_LOCATION, ""))
        _refuse_taken(session, namespace, name)
    warehouse = catalog.warehouse
    if request.location:
        location = warehouse.confine(request.location, "view location")
    elif namespace_location:
        location = (f"{warehouse.confine(namespace_location, 'namespace location')}/"
                    f"{location_segment(name)}")
    else:
        location = warehouse.default_table_location(namespace, name)
    try:
        metadata = sql_views.new_view(request.view_schema, request.view_version, location,
                                      dict(request.properties), ctx.clock.now_ms())
    except (sql_views.ViewRuleError, ValidationError) as exc:
        raise BadRequestError(
            f"invalid view {dotted_namespace(namespace, name)}: {_reason(exc)}") from exc
    keys = _confine(warehouse, metadata)
    metadata_location = sql_views.metadata_file_location(metadata, None)
    write_file(warehouse, metadata, metadata_location)
    with database.transaction(write=True) as session:
        if guard is not None:
            guard.claim(session)
        repo.lock_locations(session)  # before the name's lock, as a table's create takes them
        view_repo.lock_name(session, namespace, name)
        _namespace(session, namespace)
        _refuse_taken(session, namespace, name)
        _claim(session, f"{dotted_namespace(namespace, name)}", keys, str(metadata.view_uuid),
               ctx.clock.now_ms())
        if not view_repo.insert_view(session, namespace, name, metadata_location,
                                     metadata.view_uuid, ctx.clock.now_ms()):
            raise AlreadyExistsError(f"View already exists: {dotted_namespace(namespace, name)}")
        if guard is not None:
            guard.finish(session, {"metadata-location": metadata_location})
    logger.info("catalog_view_created", extra={"view": f"{dotted_namespace(namespace, name)}",
                                               "location": metadata_location})
    return LoadedView(metadata, metadata_location)


def commit_view(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                levels: Sequence[str], view: str, request: CommitViewRequest,
                guard: idempotency.Guard | None = None) -> LoadedView:
    """Apply a commit's updates to the view's current metadata, once its requirements hold:
    read and write files first, then swap the pointer by compare-and-swap."""
    namespace = _existing_view_namespace(levels, view)
    with database.transaction(write=False) as session:
        row = _view(session, namespace, view)
        version, location = row.version, row.metadata_location
    base = read_file(catalog.warehouse, location)
    try:
        updated = sql_views.commit(base, request.requirements, list(request.updates),
                                   ctx.clock.now_ms())
    except sql_views.RequirementFailed as exc:
        raise CommitFailedError(f"requirement failed for view {dotted_namespace(namespace, view)}: "
                                f"{exc}") from exc
    except (sql_views.ViewRuleError, ValidationError) as exc:
        raise BadRequestError(f"invalid update of view {dotted_namespace(namespace, view)}: "
                              f"{_reason(exc)}") from exc
    if updated is None:  # nothing changes: the key's outcome is recorded on its own
        if guard is not None:
            guard.outcome = {"metadata-location": location}
        return LoadedView(base, location)
    keys = _confine(catalog.warehouse, updated)
    moved = set(keys) != set(_confine(catalog.warehouse, base))
    new_location = sql_views.metadata_file_location(updated, location)
    write_file(catalog.warehouse, updated, new_location)
    with database.transaction(write=True) as session:
        if guard is not None:
            guard.claim(session)
        if moved:
            _claim(session, f"{dotted_namespace(namespace, view)}", keys, str(updated.view_uuid),
                   ctx.clock.now_ms())
        if not view_repo.swap_view(session, namespace, view, expected_version=version,
                                   metadata_location=new_location, now_ms=ctx.clock.now_ms()):
            raise CommitFailedError(f"view {dotted_namespace(namespace, view)} was changed by a concurrent "
                                    "commit, or dropped; refresh and retry")
        if guard is not None:
            guard.finish(session, {"metadata-location": new_location})
    logger.info("catalog_view_commit", extra={"view": f"{dotted_namespace(namespace, view)}",
                                              "location": new_location})
    return LoadedView(updated, new_location)


def rename_view(session: Session, ctx: ServiceContext, catalog: CatalogSite,
                source_levels: Sequence[str], source: str,
                target_levels: Sequence[str], target: str,
                guard: idempotency.Guard | None = None) -> None:
    if guard is not None:
        guard.claim(session)
    source_namespace = _existing_view_namespace(source_levels, source)
    target_namespace = namespace_name(target_levels)
    target = table_name(catalog, target_namespace, target).table
    _view(session, source_namespace, source)
    _namespace(session, target_namespace)
    view_repo.lock_name(session, target_namespace, target)
    _refuse_taken(session, target_namespace, target, renaming=f"{dotted_namespace(source_namespace, source)}")
    if not view_repo.rename_view(session, (source_namespace, source),
                                 (target_namespace, target), ctx.clock.now_ms()):
        raise NoSuchViewError(f"View does not exist: {dotted_namespace(source_namespace, source)}")
    if guard is not None:
        guard.finish(session, {})
    logger.info("catalog_view_renamed", extra={"view": f"{dotted_namespace(source_namespace, source)}",
                                               "target": f"{dotted_namespace(target_namespace, target)}"})


def drop_view(session: Session, levels: Sequence[str], view: str,
              guard: idempotency.Guard | None = None) -> None:
    """Forget the view (its metadata files stay where they are)."""
    if guard is not None:
        guard.claim(session)
    namespace = _existing_view_namespace(levels, view)
    row = _view(session, namespace, view)
    view_uuid = str(row.view_uuid)
    if not view_repo.delete_view(session, namespace, view):
        raise NoSuchViewError(f"View does not exist: {dotted_namespace(namespace, view)}")
    repo.release_claims(session, view_uuid)
    if guard is not None:
        guard.finish(session, {})
    logger.info("catalog_view_dropped", extra={"view": f"{dotted_namespace(namespace, view)}"})


def register_view(database: Database, ctx: ServiceContext, catalog: CatalogSite,
                  levels: Sequence[str], name: str, metadata_location: str,
                  guard: idempotency.Guard | None = None) -> LoadedView:
    """Point a new view at an existing metadata file inside the warehouse. The file is read
    before any transaction; a file of a view the catalog has already (same view-uuid) is
    refused."""
    namespace = namespace_name(levels)
    name = table_name(catalog, namespace, name).table
    catalog.warehouse.key(metadata_location, "view metadata file")
    with database.transaction(write=False) as session:
        _namespace(session, namespace)
    try:
        metadata = read_file(catalog.warehouse, metadata_location)
        view_uuid = sql_views.check(metadata).view_uuid
    except MetadataTooLargeError as exc:
        raise RefusedError(METADATA_TOO_LARGE, f"cannot register {metadata_location[:300]}: {exc}",
                           {"limit": catalog.warehouse.max_metadata_bytes}) from None
    except (MetadataFileError, sql_views.ViewRuleError) as exc:
        raise BadRequestError(f"cannot register {metadata_location[:300]}: {exc}") from None
    keys = _confine(catalog.warehouse, metadata)
    with database.transaction(write=True) as session:
        if guard is not None:
            guard.claim(session)
        repo.lock_locations(session)  # before the name's lock, as a table's create takes them
        view_repo.lock_name(session, namespace, name)
        _namespace(session, namespace)
        _refuse_taken(session, namespace, name)
        holder = view_repo.view_with_uuid(session, view_uuid)
        if holder is None:
            _claim(session, f"{dotted_namespace(namespace, name)}", keys, str(view_uuid), ctx.clock.now_ms())
        if holder is not None or not view_repo.insert_view(
                session, namespace, name, metadata_location, view_uuid, ctx.clock.now_ms()):
            holder = holder or view_repo.view_with_uuid(session, view_uuid) or "another view"
            raise RefusedError(
                VIEW_ALREADY_REGISTERED,
                f"the catalog already has this view (view-uuid {view_uuid}) as {holder}",
                {"view": holder}, status_code=409, type_="AlreadyExistsException")
        if guard is not None:
            guard.finish(session, {"metadata-location": metadata_location})
    logger.info("catalog_view_registered", extra={"view": f"{dotted_namespace(namespace, name)}",
                                                  "location": metadata_location})
    return LoadedView(metadata, metadata_location)
