from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from metaservice.names import QualifiedTable
from metaservice.schemas import JsonSeconds, SnapshotId

MAX_TTL_SECONDS = 7 * 24 * 3600
MAX_SNAPSHOTS_PER_LEASE = 1000

TtlSeconds = Field(gt=0, le=MAX_TTL_SECONDS, description="the lease's term, from the "
                                                          "service's clock")


class LeasedSnapshotIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    table: QualifiedTable
    snapshot_id: SnapshotId


class LeaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    holder: str = Field(min_length=1, max_length=200, description="who reads, e.g. a query id")
    ttl_seconds: JsonSeconds = TtlSeconds
    snapshots: list[LeasedSnapshotIn] = Field(min_length=1, max_length=MAX_SNAPSHOTS_PER_LEASE)


class RenewIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttl_seconds: JsonSeconds | None = Field(default=None, gt=0, le=MAX_TTL_SECONDS,
                                      description="default: the lease's original term")


class LeasedSnapshotOut(BaseModel):
    table: str
    snapshot_id: int


class LeaseOut(BaseModel):
    lease_id: str
    holder: str
    created_at: int = Field(description="ms since the Unix epoch")
    expires_at: int = Field(description="ms since the Unix epoch; the lease protects nothing "
                                        "from then on")
    expired: bool
    snapshots: list[LeasedSnapshotOut]


class LeasesOut(BaseModel):
    leases: list[LeaseOut]
