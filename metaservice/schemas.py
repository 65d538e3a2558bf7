"""Field types shared by the request and response models of every domain."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, Strict

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

JsonInt = Annotated[int, Strict()]
"""A JSON integer: a boolean, a string or a number with a fraction is refused
(docs/contract.md#barriers), never coerced."""

JsonSeconds = Annotated[float, Strict()]
"""A JSON number of seconds (fractions allowed): a boolean or a string is refused."""


def _decimal_integer(value: object) -> object:
    """A query or path parameter arrives as text: only an optional sign and digits are an
    integer (``1.0``, ``1e3`` or ``true`` are not)."""
    if isinstance(value, str) and not re.fullmatch(r"[+-]?[0-9]+", value):
        raise ValueError("must be an integer")
    return value


TextInt = Annotated[int, BeforeValidator(_decimal_integer)]
"""An integer in a URL (path or query parameter), written in decimal digits only."""

Barrier = Annotated[JsonInt, Field(ge=0, le=INT64_MAX, description="ms since the Unix epoch, UTC")]
SnapshotId = Annotated[JsonInt, Field(ge=INT64_MIN, le=INT64_MAX,
                                      description="Iceberg snapshot id")]


class ErrorDetail(BaseModel):
    code: str = Field(description="machine-readable, e.g. table_has_writer")
    message: str
    details: dict[str, Any]


class ErrorBody(BaseModel):
    """Every error answer (docs/contract.md#errors)."""

    error: ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        400: "a body that cannot be read (not UTF-8)", 401: "missing or unknown token",
        403: "the token's role or ownership does not allow it",
        404: "unknown job, table, version or route", 409: "conflict with an invariant",
        410: "the snapshot was approved for expiration", 413: "request body too large",
        422: "invalid request", 429: "rate limited", 503: "database unavailable",
    }.items()
}
