"""The Iceberg REST error model: ``{"error": {"message", "type", "code"}}``.

Every error of a catalog route is one of these, with the status code the Iceberg REST
specification gives for it. A MetaService rule that refuses a commit is a
:class:`CommitRefusedError` (409 ``CommitFailedException``) whose message starts with
MetaService's own error code, so any engine's log names the reason.
"""

from __future__ import annotations

from typing import Any, ClassVar

from metaservice.errors import MetaServiceError


class IcebergError(Exception):
    """Root of the catalog's errors."""

    status_code: ClassVar[int] = 400
    type: ClassVar[str] = "BadRequestException"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "code": self.status_code}}


class BadRequestError(IcebergError):
    status_code = 400
    type = "BadRequestException"


class NoSuchNamespaceError(IcebergError):
    status_code = 404
    type = "NoSuchNamespaceException"


class NoSuchTableError(IcebergError):
    status_code = 404
    type = "NoSuchTableException"


class ForbiddenError(IcebergError):
    status_code = 403
    type = "ForbiddenException"


class NoSuchReadSessionError(IcebergError):
    """A view's read session that expired, or never was (SPEC §12)."""

    status_code = 404
    type = "NotFoundException"


class AlreadyExistsError(IcebergError):
    status_code = 409
    type = "AlreadyExistsException"


class NamespaceNotEmptyError(IcebergError):
    status_code = 409
    type = "NamespaceNotEmptyException"


class UnprocessableEntityError(IcebergError):
    status_code = 422
    type = "UnprocessableEntityException"


class CommitFailedError(IcebergError):
    """The table changed since the client read it (a requirement failed or the pointer swap
    lost its race): the client refreshes and retries."""

    status_code = 409
    type = "CommitFailedException"


class CommitRefusedError(CommitFailedError):
    """A MetaService rule refused the commit (SPEC §11); ``code`` is MetaService's error code."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"metaservice {code}: {message}")
        self.code = code
        self.details = details or {}

    @classmethod
    def from_domain(cls, error: MetaServiceError) -> CommitRefusedError:
        return cls(error.code, error.message, error.details)


class ServiceUnavailableError(IcebergError):
    status_code = 503
    type = "ServiceUnavailableException"


_TYPES_BY_STATUS = {
    400: "BadRequestException",
    401: "NotAuthorizedException",
    403: "ForbiddenException",
    404: "NotFoundException",
    405: "MethodNotAllowedException",
    409: "CommitFailedException",
    413: "BadRequestException",
    422: "UnprocessableEntityException",
    429: "TooManyRequestsException",
    503: "ServiceUnavailableException",
}


def iceberg_body(status: int, message: str, type_: str | None = None) -> dict[str, Any]:
    """The Iceberg error body for a status the catalog did not raise itself (authentication,
    rate limiting, the framework)."""
    return {"error": {"message": message,
                      "type": type_ or _TYPES_BY_STATUS.get(status, "RESTException"),
                      "code": status}}
