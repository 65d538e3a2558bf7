"""Field types shared by the request and response models of every domain."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

Barrier = Annotated[int, Field(ge=0, le=INT64_MAX, description="ms since the Unix epoch, UTC")]
SnapshotId = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX, description="Iceberg snapshot id")]
QualifiedTable = Annotated[
    str,
    Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}\.[A-Za-z0-9_][A-Za-z0-9_-]{0,127}"
                  r"\.[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$",
          description="catalog.database.table"),
]
