from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from metaservice.core.cuts import Consistency
from metaservice.schemas import Barrier, JsonSeconds, QualifiedTable

MAX_TABLES_PER_REQUEST = 1000


class VersionOut(BaseModel):
    table: str
    consistency: Literal["strong", "weak"]
    barrier: int = Field(description="the cut: the same for every table of a component")
    snapshot_id: int
    snapshot_barrier: int = Field(description="the barrier the snapshot completed (≤ barrier)")


class VersionsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    consistency: Consistency = Consistency.strong
    tables: list[QualifiedTable] = Field(min_length=1, max_length=MAX_TABLES_PER_REQUEST)
    barrier: Barrier | None = Field(default=None,
                                    description="explicit barrier: a reproducible read")
    lease_seconds: JsonSeconds | None = Field(default=None, gt=0, le=7 * 24 * 3600)
    holder: str | None = Field(default=None, max_length=200)


class TableVersion(BaseModel):
    barrier: int = Field(description="the cut: the same for every table of a component")
    snapshot_id: int
    snapshot_barrier: int = Field(description="the barrier the snapshot completed (≤ barrier)")


class VersionsOut(BaseModel):
    consistency: Literal["strong", "weak", "barrier"]
    versions: dict[str, TableVersion]
    lease_id: str | None = None
    expires_at: int | None = None
