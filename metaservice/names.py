"""Validated identifiers (docs/contract.md#tables-and-names): table names and job ids, read as
``metaservice_names`` reads them (one reading for the server and the plugin), and the field type
of a table named in a request body. The path parameter types that validate them in URLs are in
``metaservice/path_params.py``."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from metaservice_names import (
    JOB_ID_PATTERN,
    NAME_PART_MAX,
    NAMESPACE_MAX,
    NAMESPACE_SEPARATOR,
    TableName,
    check_namespace,
    check_part,
    check_stored_namespace,
    dotted,
    dotted_namespace,
    namespace_levels,
    qualified,
    split_dotted,
)

__all__ = ["JOB_ID_PATTERN", "NAME_PART_MAX", "NAMESPACE_MAX", "NAMESPACE_SEPARATOR",
           "QualifiedTable", "TableName", "check_namespace", "check_part",
           "check_stored_namespace", "dotted", "dotted_namespace", "namespace_levels",
           "qualified", "qualified_table", "split_dotted"]


def qualified_table(value: str) -> str:
    """A dotted table name in its canonical spelling; ``ValueError`` when it is not one (the
    validator of :data:`QualifiedTable`)."""
    return str(TableName.parse(value))


QualifiedTable = Annotated[
    str,
    AfterValidator(qualified_table),
    Field(description="catalog.database.table: a namespace of several levels is written with "
                      "one part each (lake.a.b.t); a part holding anything beyond letters, "
                      "digits, _ and - is written in backticks (lake.`new.db`.t)"),
]
