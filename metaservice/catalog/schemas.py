"""The catalog's own response documents and list parameters (its request bodies are
``requests.py``; its table models are pyiceberg's)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query
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
        400: "bad request, or a MetaService refusal a retry cannot change (BadRequestException; "
             "the message starts with metaservice <code>:)",
        401: "missing or unknown token (NotAuthorizedException)",
        403: "the token's role does not allow it, or it does not own the table's running job "
             "(ForbiddenException)",
        404: "no such namespace or table (NoSuchNamespaceException, NoSuchTableException)",
        409: "already exists (AlreadyExistsException), not empty, or a lost race: the "
             "table changed since it was read (CommitFailedException, the one error to "
             "retry)",
        410: "a read session's snapshot is no longer in the table's metadata "
             "(snapshot_expired)",
        422: "unprocessable (UnprocessableEntityException)",
        429: "rate limited, or too many read sessions",
        500: "internal error", 503: "database unavailable",
    }.items()
}


# The list routes' pagination parameters (``catalog/pages.py``).
PageToken = Annotated[str | None, Query(alias="pageToken", max_length=2000)]
PageSize = Annotated[int | None, Query(alias="pageSize")]
PlanId = Annotated[str, Path(alias="plan_id", max_length=200,
                             description="a scan plan's id, as its planning answered it")]
