"""Validated identifiers (SPEC §2): table names and job ids."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from fastapi import Path

NAME_PART_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$"
JOB_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,200}$"
_NAME_PART = re.compile(NAME_PART_PATTERN)

CatalogPath = Annotated[str, Path(pattern=NAME_PART_PATTERN, description="Iceberg catalog name")]
DatabasePath = Annotated[str, Path(pattern=NAME_PART_PATTERN, description="database (namespace)")]
TablePath = Annotated[str, Path(pattern=NAME_PART_PATTERN, description="table name")]
JobPath = Annotated[str, Path(pattern=JOB_ID_PATTERN, description="job id chosen by the client")]


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
