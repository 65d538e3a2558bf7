"""Validated identifiers (docs/contract.md#tables-and-names): table names and job ids. Plain values:
the path parameter types that validate them in URLs are in ``metaservice/path_params.py``."""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME_PART_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$"
JOB_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,200}$"
_NAME_PART = re.compile(NAME_PART_PATTERN)


@dataclass(frozen=True, order=True)
class TableName:
    """``catalog.database.table``; each part validated, case-sensitive."""

    catalog: str
    database: str
    table: str

    def __post_init__(self) -> None:
        for part in (self.catalog, self.database, self.table):
            if not _NAME_PART.match(part):
                raise ValueError(
                    f"invalid table name part {part!r}: must match {NAME_PART_PATTERN}"
                )

    @classmethod
    def parse(cls, qualified: str) -> TableName:
        parts = qualified.split(".")
        if len(parts) != 3:
            raise ValueError(f"table {qualified!r} must be named catalog.database.table")
        return cls(*parts)

    def __str__(self) -> str:
        return f"{self.catalog}.{self.database}.{self.table}"
