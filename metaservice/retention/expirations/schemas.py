from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from metaservice.schemas import SnapshotId

MAX_SNAPSHOTS_PER_REQUEST = 10_000


class ExpirationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    snapshot_ids: list[SnapshotId] = Field(max_length=MAX_SNAPSHOTS_PER_REQUEST,
                                           description="snapshots the tool proposes to expire")
    approve_unknown: bool = Field(
        default=False,
        description="also approve snapshots that complete no barrier of the table (never "
                    "handed out by MetaService, e.g. the intermediate snapshots of an overwrite)")


class RefusedOut(BaseModel):
    snapshot_id: int
    reason: str = Field(description="latest, strong_cut, job_source:<job>, lease:<id>, "
                                    "unknown or already_expired")
    reasons: list[str] = Field(description="every rule that protects the snapshot")


class ExpirationOut(BaseModel):
    expiration_id: str
    table: str
    approved: list[int] = Field(description="never handed out or leased from now on; delete "
                                            "them, then report the ones really deleted")
    refused: list[RefusedOut]


class CompletionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    snapshot_ids: list[SnapshotId] = Field(max_length=MAX_SNAPSHOTS_PER_REQUEST,
                                           description="the approved snapshots really deleted")


class ExpirationStateOut(BaseModel):
    expiration_id: str
    table: str
    requested_at: int
    completed_at: int | None
    approved: list[int] = Field(description="approved and not (yet) reported as deleted")
    expired: list[int]


class ProtectedSnapshotOut(BaseModel):
    snapshot_id: int
    barrier: int | None = Field(description="the greatest barrier it completes")
    reasons: list[str]


class ProtectedOut(BaseModel):
    table: str
    snapshots: list[ProtectedSnapshotOut]
