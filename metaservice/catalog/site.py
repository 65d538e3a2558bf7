"""The catalog's identity and its name rules: a MetaService table is ``catalog.database.table``,
so a catalog namespace has exactly one level, and each part matches ``NAME_PART_PATTERN``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from metaservice.catalog import pages
from metaservice.catalog.errors import BadRequestError, NoSuchNamespaceError, NoSuchTableError
from metaservice.catalog.storage.credentials import CredentialVendor, RequestSigner
from metaservice.catalog.storage.warehouse import Warehouse
from metaservice.names import NAME_PART_PATTERN, TableName


@dataclass(frozen=True)
class CatalogSite:
    """The catalog's identity and storage: its name (the first part of every table name), its
    warehouse, what vends credentials for its tables' files and what signs requests to them
    (None: nothing does), and the signer's URL as clients reach it."""

    name: str
    warehouse: Warehouse
    credentials: CredentialVendor | None = None
    signer: RequestSigner | None = None
    signer_uri: str = ""


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
        raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(levels)}")
    return levels[0]


def existing_table_namespace(levels: Sequence[str], table: str) -> str:
    """The namespace of a table a read names; one this catalog cannot hold has no tables
    (404)."""
    if len(levels) != 1 or not _NAME_PART.match(levels[0]):
        raise NoSuchTableError(f"Table does not exist: {'.'.join([*levels, table])}")
    return levels[0]


def _part(value: str, what: str) -> str:
    if not _NAME_PART.match(value):
        raise BadRequestError(f"invalid {what} name {value!r}: must match {NAME_PART_PATTERN}")
    return value


def table_name(catalog: CatalogSite, namespace: str, table: str) -> TableName:
    return TableName(catalog.name, namespace, _part(table, "table"))


def one_more(wanted: pages.Page) -> int | None:
    """How many rows a list reads for a page: one more than it answers, to know whether another
    page follows."""
    return None if wanted.size is None else wanted.size + 1
