"""Catalog input that makes no valid table, refused as a bad request before anything is
written or stored (docs/contract.md#errors-say-whether-to-retry: every malformed request is a 4xx,
on both backends).

pyiceberg's models accept much that its own code then fails on, with exceptions of every
kind: a ``decimal(99,99)`` column (its ``ValidationError``, which is no ``ValueError``), a
commit that leaves no current schema (``StopIteration``), a file that is not table metadata
(``TypeError``), a location no FileIO of the server reaches. Each function here takes a parsed
or built value and raises :class:`BadRequestError`; nothing here does I/O.

Text no database stores and JSON nested too deep are refused for every route, before this
(``metaservice/request_input.py``).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata

from metaservice.catalog.errors import BadRequestError

INVALID_METADATA: tuple[type[Exception], ...] = (
    ValueError, TypeError, KeyError, StopIteration, IcebergValidationError)
"""What pyiceberg raises on metadata, or updates, that make no valid table. (A pydantic
``ValidationError`` is a ``ValueError``; ``StopIteration`` is its lookup by id of a current
schema, default spec or sort order that a commit left dangling.)"""

UNREADABLE_METADATA_FILE: tuple[type[Exception], ...] = (OSError, RecursionError,
                                                          *INVALID_METADATA)
"""What reading a file that is not table metadata raises: missing, a directory, not JSON, not
UTF-8, JSON of another shape, types nested deep enough to exhaust the parser's stack."""

MAX_TYPE_DEPTH = 32
"""Types nested in one another (struct, list, map) in a schema, at most: pyiceberg's schema
code recurses once per level, several frames deep."""

MAX_LOCATION_LENGTH = 1024
"""A table location or metadata path, at most: a metadata file's location (the path plus about
70 characters) must fit the 2,048 characters the database keeps."""

LOCATION_PROPERTIES = (TableProperties.WRITE_METADATA_PATH, TableProperties.WRITE_DATA_PATH)


def describe(exc: BaseException) -> str:
    """A short account of why pyiceberg refused something, for the error message."""
    if isinstance(exc, StopIteration):
        return ("the table would have no current schema, default partition spec or default sort "
                "order (a commit creating a table adds and sets each)")
    if isinstance(exc, RecursionError):
        return f"types are nested more than {MAX_TYPE_DEPTH} levels deep"
    if isinstance(exc, ValidationError):
        first = exc.errors()[0] if exc.errors() else {"msg": str(exc), "loc": ()}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where}: {first['msg']}" if where else str(first["msg"])
    return str(exc)[:500] or type(exc).__name__


def table_metadata(metadata: TableMetadata, warehouse: str) -> None:
    """Metadata the catalog is about to write or point at (a new table, a registered file):
    its locations are ones the warehouse's FileIO reaches, its types nest at most
    :data:`MAX_TYPE_DEPTH` levels, its default partition spec and sort order name columns of
    its current schema."""
    for schema in metadata.schemas:
        check_schema_depth(schema.model_dump(mode="json", by_alias=True))
    _check_locations(metadata, warehouse)
    try:
        metadata.spec().check_compatible(metadata.schema())
        metadata.sort_order().check_compatible(metadata.schema())
    except INVALID_METADATA as exc:
        raise BadRequestError(f"invalid table: {describe(exc)}") from exc


def table_update(base: TableMetadata | None, metadata: TableMetadata, warehouse: str) -> None:
    """A commit's result (``base`` None: the commit creates the table): its locations are
    ones the warehouse's FileIO reaches, and every partition spec and sort order the commit adds
    names columns of the current schema, as Iceberg's own metadata builder requires. (The
    schemas it adds were measured while its body was read, ``catalog/requests.py``.)"""
    _check_locations(metadata, warehouse)
    known_specs = {spec.spec_id for spec in base.partition_specs} if base is not None else set()
    known_orders = {order.order_id for order in base.sort_orders} if base is not None else set()
    schema = metadata.schema()
    try:
        for spec in metadata.partition_specs:
            if spec.spec_id not in known_specs:
                spec.check_compatible(schema)
        for order in metadata.sort_orders:
            if order.order_id not in known_orders:
                order.check_compatible(schema)
    except INVALID_METADATA as exc:
        raise BadRequestError(f"invalid update: {describe(exc)}") from exc


def _check_locations(metadata: TableMetadata, warehouse: str) -> None:
    named = [("location", metadata.location)] + [
        (key, metadata.properties[key]) for key in LOCATION_PROPERTIES
        if key in metadata.properties]
    for what, location in named:
        _check_location(what, location, warehouse)


def _check_location(what: str, location: str, warehouse: str) -> None:
    """Where a location lies is the warehouse's to judge (``Warehouse.confine_table``,
    docs/contract.md#files-stay-inside-the-warehouse); here, only that the database can keep it."""
    if len(location) > MAX_LOCATION_LENGTH:
        raise BadRequestError(f"{what} is longer than {MAX_LOCATION_LENGTH} characters")


def check_schema_depth(schema: Any) -> None:
    if _type_depth(schema) > MAX_TYPE_DEPTH:
        raise BadRequestError(
            f"invalid schema: types are nested more than {MAX_TYPE_DEPTH} levels deep")


def _type_depth(document: Any) -> int:
    """How many nested types (struct, list, map) the JSON of a type holds on its deepest path,
    itself included; what is not a type's JSON counts nothing (its parser refuses it).
    Iterative: any depth is measured without recursion."""
    deepest = 0
    pending = [(document, 1)]
    while pending:
        node, depth = pending.pop()
        if not isinstance(node, dict) or node.get("type") not in ("struct", "list", "map"):
            continue
        deepest = max(deepest, depth)
        if node["type"] == "struct":
            fields = node.get("fields")
            children = [field.get("type") for field in (fields if isinstance(fields, list) else [])
                        if isinstance(field, dict)]
        elif node["type"] == "list":
            children = [node.get("element")]
        else:
            children = [node.get("key"), node.get("value")]
        pending.extend((child, depth + 1) for child in children)
    return deepest


WRITTEN_FORMAT_VERSIONS = (1, 2)
"""The table format versions whose metadata pyiceberg (and so this catalog) writes."""


def writable_format(metadata: TableMetadata) -> None:
    """Refuse a table whose metadata the catalog could not write."""
    if metadata.format_version not in WRITTEN_FORMAT_VERSIONS:
        raise BadRequestError(
            f"format-version {metadata.format_version} tables are not served: this catalog "
            f"writes table metadata of format versions {WRITTEN_FORMAT_VERSIONS[0]} and "
            f"{WRITTEN_FORMAT_VERSIONS[1]}")
