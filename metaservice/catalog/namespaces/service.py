"""The catalog's namespaces: one level or more (a MetaService database), with their properties;
a namespace of several levels lies inside its parent, which exists as long as it does; a
namespace's ``location`` lies inside the warehouse."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.orm import Session

from metaservice.catalog import pages
from metaservice.catalog.errors import (
    AlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchFunctionError,
    NoSuchNamespaceError,
    UnprocessableEntityError,
)
from metaservice.catalog.namespaces import repository as repo
from metaservice.catalog.site import (
    CatalogSite,
    existing_namespace_name,
    namespace_name,
    one_more,
)
from metaservice.catalog.views import repository as view_repo
from metaservice.context import ServiceContext
from metaservice.db.models import IcebergNamespaceRow
from metaservice.names import NAMESPACE_SEPARATOR, dotted_namespace, namespace_levels

logger = logging.getLogger(__name__)

NAMESPACE_LOCATION = "location"


def namespace_row(session: Session, name: str, *, lock: bool = False) -> IcebergNamespaceRow:
    row = repo.get_namespace(session, name, lock=lock)
    if row is None:
        raise NoSuchNamespaceError(f"Namespace does not exist: {dotted_namespace(name)}")
    return row


def list_namespaces(session: Session, parent: Sequence[str] | None,
                    wanted: pages.Page = pages.EVERYTHING) -> tuple[list[list[str]], str | None]:
    """One page of namespaces, and the next page's token."""
    under = None
    if parent:
        under = existing_namespace_name(parent)
        namespace_row(session, under)
    names, token = pages.next_token(
        repo.list_namespaces(session, under, wanted.after, one_more(wanted)), wanted)
    return [list(namespace_levels(name)) for name in names], token


def create_namespace(session: Session, ctx: ServiceContext, catalog: CatalogSite,
                     levels: Sequence[str],
                     properties: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    name = namespace_name(levels)
    _confine_namespace_location(catalog, properties)
    if len(levels) > 1:
        parent = name.rsplit(NAMESPACE_SEPARATOR, 1)[0]
        if repo.get_namespace(session, parent, lock=True) is None:
            raise NoSuchNamespaceError(f"Cannot create namespace {dotted_namespace(name)}: "
                                       f"parent namespace {dotted_namespace(parent)} does not "
                                       "exist")
    if not repo.create_namespace(session, name, dict(properties), ctx.clock.now_ms()):
        raise AlreadyExistsError(f"Namespace already exists: {dotted_namespace(name)}")
    logger.info("catalog_namespace_created", extra={"namespace": dotted_namespace(name)})
    return list(levels), dict(properties)


def load_namespace(session: Session, levels: Sequence[str]) -> dict[str, str]:
    return dict(namespace_row(session, existing_namespace_name(levels)).properties)


def list_functions(session: Session, levels: Sequence[str], wanted: pages.Page) -> list[str]:
    """A namespace's functions (the Iceberg REST specification's ``listFunctions``): the
    catalog holds none, so every page of an existing namespace is empty."""
    namespace_row(session, existing_namespace_name(levels))
    del wanted  # a valid token or size is accepted; there is nothing to page through
    return []


def load_function(session: Session, levels: Sequence[str], function: str) -> None:
    """``loadFunction``: 404 ``NoSuchNamespaceException`` for a namespace that does not
    exist, else ``NoSuchFunctionException`` (the catalog holds no function)."""
    namespace = namespace_row(session, existing_namespace_name(levels)).name
    raise NoSuchFunctionError(f"Function does not exist: {dotted_namespace(namespace, function[:300])}")


def drop_namespace(session: Session, levels: Sequence[str]) -> None:
    name = namespace_name(levels)
    namespace_row(session, name, lock=True)  # no child is created meanwhile (create_namespace)
    if (repo.count_tables(session, name) or view_repo.count_views(session, name)
            or repo.has_children(session, name)):
        raise NamespaceNotEmptyError(f"Namespace {dotted_namespace(name)} is not empty")
    repo.drop_namespace(session, name)


def _confine_namespace_location(catalog: CatalogSite, properties: dict[str, str]) -> None:
    location = properties.get(NAMESPACE_LOCATION)
    if location is not None:
        catalog.warehouse.key(location, "namespace location")


def update_namespace_properties(session: Session, catalog: CatalogSite, levels: Sequence[str],
                                removals: list[str],
                                updates: dict[str, str]) -> dict[str, list[str]]:
    name = namespace_name(levels)
    _confine_namespace_location(catalog, updates)
    row = namespace_row(session, name)
    overlap = set(removals) & set(updates)
    if overlap:
        raise UnprocessableEntityError(
            f"properties both removed and updated: {', '.join(sorted(overlap))}")
    properties = dict(row.properties)
    removals = list(dict.fromkeys(removals))  # a key named twice is removed once
    removed = [key for key in removals if key in properties]
    missing = [key for key in removals if key not in properties]
    for key in removed:
        del properties[key]
    properties.update(updates)
    repo.set_namespace_properties(session, name, properties)
    return {"removed": removed, "updated": list(updates), "missing": missing}

