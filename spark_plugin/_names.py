"""Validated identifiers (docs/contract.md#tables-and-names): ``catalog.database.table`` names and
job ids.

Validated on the client so that a bad name fails where it was written, before any Spark work,
with the same rules the server applies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME_PART_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$"
JOB_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,200}$"
_NAME_PART = re.compile(NAME_PART_PATTERN)
_JOB_ID = re.compile(JOB_ID_PATTERN)


@dataclass(frozen=True, order=True)
class TableName:
    """An Iceberg table as MetaService names it: ``<pyiceberg catalog>.<database>.<table>``.

    Case-sensitive; each part matches ``NAME_PART_PATTERN``. Plain and picklable, so it can be
    shipped to executors.
    """

    catalog: str
    database: str
    table: str

    def __post_init__(self) -> None:
        for part in (self.catalog, self.database, self.table):
            if not isinstance(part, str) or not _NAME_PART.match(part):
                raise ValueError(
                    f"invalid table name part {part!r}: each part must match {NAME_PART_PATTERN}")

    @classmethod
    def parse(cls, name: str | TableName) -> TableName:
        """Parse ``"catalog.database.table"`` (a ``TableName`` is returned unchanged)."""
        if isinstance(name, TableName):
            return name
        if not isinstance(name, str):
            raise TypeError(f"a table name must be a str, not {type(name).__name__}")
        parts = name.split(".")
        if len(parts) != 3:
            raise ValueError(f"table {name!r} must be named catalog.database.table")
        return cls(*parts)

    @property
    def identifier(self) -> tuple[str, str]:
        """The pyiceberg identifier inside the catalog: ``(database, table)``."""
        return (self.database, self.table)

    @property
    def path(self) -> str:
        """The URL path form used by the REST API: ``catalog/database/table``."""
        return f"{self.catalog}/{self.database}/{self.table}"

    def __str__(self) -> str:
        return f"{self.catalog}.{self.database}.{self.table}"


def validate_job_id(job: str) -> str:
    """Return ``job`` if it is a valid job id (``JOB_ID_PATTERN``), else raise ``ValueError``."""
    if not isinstance(job, str) or not _JOB_ID.match(job):
        raise ValueError(f"invalid job id {job!r}: must match {JOB_ID_PATTERN}")
    return job
