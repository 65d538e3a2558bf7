from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from metaservice.core.cuts import Consistency
from metaservice.names import QualifiedTable
from metaservice.schemas import Barrier, JsonSeconds

MAX_TABLES_PER_REQUEST = 1000


class TableHoldOut(BaseModel):
    """A catching-up table that pins its component's strong cut at its floor, and its writer."""

    table: str
    latest_barrier: int | None = Field(description="its latest completed barrier, if any")
    catching_up: bool
    catch_up_floor: int | None = Field(
        description="the cut its component had when it joined: the cut is held there")
    writer_job: str | None = Field(description="the running job that writes it")
    writer_started_at: int | None = Field(
        description="when that job started (ms since the epoch): since when the cut is held")


HELD_BACK_BY = ("strong answers only, present only when the cut is held: the catching-up "
                "tables (with their writers) that keep the component's strong cut at their "
                "floor although its other tables are exact together at a newer barrier")


class VersionOut(BaseModel):
    table: str
    consistency: Literal["strong", "weak"]
    barrier: int = Field(description="the cut: the same for every table of a component")
    snapshot_id: int
    snapshot_barrier: int = Field(description="the barrier the snapshot completed (≤ barrier)")
    held_back_by: list[TableHoldOut] | None = Field(default=None, description=HELD_BACK_BY)


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
    held_back_by: list[TableHoldOut] | None = Field(default=None, description=HELD_BACK_BY)


class VersionsOut(BaseModel):
    consistency: Literal["strong", "weak", "barrier"]
    versions: dict[str, TableVersion]
    lease_id: str | None = None
    expires_at: int | None = None
