"""The catalog's identity and its name rules: a table is its catalog, its namespace (one level or
more, stored as the levels joined by ``\x1f``) and its name, each part a valid name
(``metaservice/names.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from metaservice.catalog import pages
from metaservice.catalog.errors import BadRequestError, NoSuchNamespaceError, NoSuchTableError
from metaservice.catalog.storage.credentials import CredentialVendor, RequestSigner
from metaservice.catalog.storage.warehouse import Warehouse
from metaservice.names import NAME_PART_MAX, TableName, check_namespace, check_part


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
    """A namespace's stored form (its levels joined by ``\x1f``); 400 when a level is not a
    valid name (``metaservice/names.py``)."""
    try:
        return check_namespace(levels)
    except ValueError as exc:
        raise BadRequestError(str(exc)) from exc


def existing_namespace_name(levels: Sequence[str]) -> str:
    """The namespace a read names; one this catalog cannot hold does not exist (404)."""
    try:
        return check_namespace(levels)
    except ValueError:
        raise NoSuchNamespaceError(f"Namespace does not exist: {_written(levels)}") from None


def existing_table_namespace(levels: Sequence[str], table: str) -> str:
    """The namespace of a table a read names; one this catalog cannot hold has no tables
    (404)."""
    try:
        check_part(table)
        return check_namespace(levels)
    except ValueError:
        raise NoSuchTableError(f"Table does not exist: {_written([*levels, table])}") from None


def _written(parts: Sequence[str]) -> str:
    return ".".join(str(part)[:NAME_PART_MAX] for part in parts)[:1000]


def _part(value: str, what: str) -> str:
    try:
        return check_part(value, f"{what} name")
    except ValueError as exc:
        raise BadRequestError(str(exc)) from exc


def table_name(catalog: CatalogSite, namespace: str, table: str) -> TableName:
    return TableName(catalog.name, namespace, _part(table, "table"))


def one_more(wanted: pages.Page) -> int | None:
    """How many rows a list reads for a page: one more than it answers, to know whether another
    page follows."""
    return None if wanted.size is None else wanted.size + 1
