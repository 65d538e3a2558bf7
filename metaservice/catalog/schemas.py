"""The catalog's own response documents (its request and table models are pyiceberg's)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class IcebergErrorModel(BaseModel):
    message: str
    type: str
    code: int


class IcebergErrorResponse(BaseModel):
    """The Iceberg REST error model."""

    error: IcebergErrorModel


ICEBERG_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": IcebergErrorResponse, "description": description}
    for status, description in {
        400: "bad request (BadRequestException)",
        401: "missing or unknown token (NotAuthorizedException)",
        403: "the token's role does not allow it (ForbiddenException)",
        404: "no such namespace or table (NoSuchNamespaceException, NoSuchTableException)",
        409: "already exists, not empty, or commit failed (CommitFailedException; a MetaService "
             "refusal names its code in the message)",
        410: "a view's snapshot is no longer in the table's metadata (snapshot_expired)",
        422: "unprocessable (UnprocessableEntityException)",
        429: "rate limited", 500: "internal error", 503: "database unavailable",
    }.items()
}
