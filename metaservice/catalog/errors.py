"""The Iceberg REST error model: ``{"error": {"message", "type", "code"}}``.

Every error of a catalog route is one of these, with the status code the Iceberg REST
specification gives for it. Only a lost compare-and-swap (a requirement that no longer holds)
is 409 ``CommitFailedException``, the one error clients retry. A MetaService rule that refuses a
request is a :class:`RefusedError` whose status says that a retry cannot help (400
``BadRequestException``, 403 ``ForbiddenException``, 404, 422, 429) and whose message starts
with MetaService's own error code (``metaservice <code>: …``), so any engine's log names the
reason (docs/contract.md#who-changes-a-table).
"""

from __future__ import annotations

from typing import Any, ClassVar

from metaservice.errors import MetaServiceError


class IcebergError(Exception):
    """Root of the catalog's errors."""

    status_code: ClassVar[int] = 400
    type: ClassVar[str] = "BadRequestException"
    headers: ClassVar[dict[str, str] | None] = None

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


class NoSuchFunctionError(IcebergError):
    status_code = 404
    type = "NoSuchFunctionException"


class ForbiddenError(IcebergError):
    status_code = 403
    type = "ForbiddenException"


class NoSuchReadSessionError(IcebergError):
    """A read session of a consistent warehouse that expired, or never was
    (docs/contract.md#read-sessions)."""

    status_code = 404
    type = "NotFoundException"


class NoSuchPlanIdError(IcebergError):
    """A scan plan that was cancelled, expired, or never was (docs/contract.md#scan-planning)."""

    status_code = 404
    type = "NoSuchPlanIdException"


class NoSuchPlanTaskError(IcebergError):
    """A plan task of no live scan plan (docs/contract.md#scan-planning)."""

    status_code = 404
    type = "NoSuchPlanTaskException"


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


class RefusedError(IcebergError):
    """A MetaService rule refused the request; ``code`` is MetaService's error code. The status
    is the domain error's, except that a conflict a retry cannot resolve is 400: a client retries
    only a 409 ``CommitFailedException``."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None, *,
                 status_code: int = 400, type_: str | None = None) -> None:
        super().__init__(f"metaservice {code}: {message}")
        self.code = code
        self.details = details or {}
        self._status = status_code
        self._type = type_

    @property  # type: ignore[override]
    def status_code(self) -> int:  # type: ignore[override]
        return self._status

    @property  # type: ignore[override]
    def type(self) -> str:  # type: ignore[override]
        return self._type or _TYPES_BY_STATUS.get(self._status, "BadRequestException")

    @classmethod
    def from_domain(cls, error: MetaServiceError, *, commit: bool = False) -> IcebergError:
        """The catalog's answer to a domain error: a retryable conflict stays a 409
        ``CommitFailedException``; any other refusal gets a status that says not to retry. A
        commit's 404 and 410 are 400 too: there, a client reads 404 as "no such table"."""
        if error.code in RETRYABLE_CODES:
            return CommitFailedError(f"metaservice {error.code}: {error.message}")
        status = error.status_code
        if status == 409 or (commit and status in (404, 410)):
            status = 400
        return cls(error.code, error.message, error.details, status_code=status)


# Domain conflicts that a retry after a refresh can resolve.
RETRYABLE_CODES = frozenset({"concurrent_update"})

NOT_TABLE_OWNER = "not_table_owner"
LOCATION_OUTSIDE_WAREHOUSE = "location_outside_warehouse"
TABLE_ALREADY_REGISTERED = "table_already_registered"
HEAD_NOT_FORWARD = "head_not_forward"
TOO_MANY_READ_SESSIONS = "too_many_read_sessions"
TOO_MANY_SCAN_PLANS = "too_many_scan_plans"
TABLE_IN_USE = "table_in_use"
IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
METADATA_TOO_LARGE = "metadata_too_large"


def not_table_owner(message: str, **details: Any) -> RefusedError:
    return RefusedError(NOT_TABLE_OWNER, message, details, status_code=403)


def outside_warehouse(message: str, **details: Any) -> RefusedError:
    return RefusedError(LOCATION_OUTSIDE_WAREHOUSE, message, details, status_code=400)


class ServiceUnavailableError(IcebergError):
    status_code = 503
    type = "ServiceUnavailableException"
    headers = {"Retry-After": "1"}  # noqa: RUF012 - read only


_TYPES_BY_STATUS = {
    400: "BadRequestException",
    401: "NotAuthorizedException",
    403: "ForbiddenException",
    404: "NotFoundException",
    405: "MethodNotAllowedException",
    409: "CommitFailedException",
    410: "NotFoundException",
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
