"""The catalog's namespaces: one level each (a MetaService database), with their properties;
a namespace's ``location`` lies inside the warehouse."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.orm import Session

from metaservice.catalog import pages
from metaservice.catalog.errors import (
    AlreadyExistsError,
    NamespaceNotEmptyError,
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

logger = logging.getLogger(__name__)

NAMESPACE_LOCATION = "location"


def namespace_row(session: Session, name: str) -> IcebergNamespaceRow:
    row = repo.get_namespace(session, name)
    if row is None:
        raise NoSuchNamespaceError(f"Namespace does not exist: {name}")
    return row


def list_namespaces(session: Session, parent: Sequence[str] | None,
                    wanted: pages.Page = pages.EVERYTHING) -> tuple[list[list[str]], str | None]:
    """One page of namespaces, and the next page's token."""
    if parent:
        namespace_name(parent)
        namespace_row(session, parent[0])
        return [], None  # one-level namespaces have no children
    names, token = pages.next_token(
        repo.list_namespaces(session, wanted.after, one_more(wanted)), wanted)
    return [[name] for name in names], token


def create_namespace(session: Session, ctx: ServiceContext, catalog: CatalogSite,
                     levels: Sequence[str],
                     properties: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    name = namespace_name(levels)
    _confine_namespace_location(catalog, properties)
    if not repo.create_namespace(session, name, dict(properties), ctx.clock.now_ms()):
        raise AlreadyExistsError(f"Namespace already exists: {name}")
    logger.info("catalog_namespace_created", extra={"namespace": name})
    return [name], dict(properties)


def load_namespace(session: Session, levels: Sequence[str]) -> dict[str, str]:
    return dict(namespace_row(session, existing_namespace_name(levels)).properties)


def drop_namespace(session: Session, levels: Sequence[str]) -> None:
    name = namespace_name(levels)
    namespace_row(session, name)
    if repo.count_tables(session, name) or view_repo.count_views(session, name):
        raise NamespaceNotEmptyError(f"namespace {name} is not empty")
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

