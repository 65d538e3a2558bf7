"""Field types shared by the request and response models of every domain."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

Barrier = Annotated[int, Field(ge=0, le=INT64_MAX, description="ms since the Unix epoch, UTC")]
SnapshotId = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX, description="Iceberg snapshot id")]
QualifiedTable = Annotated[
    str,
    Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}\.[A-Za-z0-9_][A-Za-z0-9_-]{0,127}"
                  r"\.[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$",
          description="catalog.database.table"),
]


class ErrorDetail(BaseModel):
    code: str = Field(description="machine-readable, e.g. table_has_writer")
    message: str
    details: dict[str, Any]


class ErrorBody(BaseModel):
    """Every error answer (SPEC §9)."""

    error: ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        401: "missing or unknown token", 403: "the token's role or ownership does not allow it",
        404: "unknown job, table, version or route", 409: "conflict with an invariant",
        410: "the snapshot was approved for expiration", 413: "request body too large",
        422: "invalid request", 429: "rate limited", 503: "database unavailable",
    }.items()
}
