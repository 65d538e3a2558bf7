"""Every exception the plugin raises, under one root.

The tree::

    MetaServiceError                      root: catch this to catch everything below
    ├── TransportError                    no usable answer: connection refused, timeout, bad body
    ├── APIError                          the server answered with an error (SPEC §9 JSON)
    │   ├── InvalidRequestError           422 invalid_request
    │   ├── AuthenticationError           401 unauthorized
    │   ├── PermissionDeniedError         403 forbidden
    │   ├── NotFoundError                 404 (not_found: unknown route)
    │   │   ├── UnknownJobError           404 unknown_job
    │   │   ├── UnknownTableError         404 unknown_table
    │   │   ├── NoVersionError            404 no_version
    │   │   ├── CatchingUpError           404 catching_up
    │   │   └── UnknownLeaseError         404 unknown_lease
    │   ├── ConflictError                 409
    │   │   ├── TableHasWriterError       409 table_has_writer
    │   │   ├── CycleError                409 cycle (.path)
    │   │   ├── BarrierRegressionError    409 barrier_regression
    │   │   ├── UnknownBarrierError       409 unknown_barrier
    │   │   ├── NotASinkError             409 not_a_sink
    │   │   ├── JobNotRunningError        409 job_not_running
    │   │   ├── JobNotPlannedError        409 job_not_planned
    │   │   ├── BarrierNotCompleteError   409 barrier_not_complete (.tables)
    │   │   └── ConcurrentUpdateError     409 concurrent_update (safe to retry)
    │   ├── SnapshotExpiredError          410 snapshot_expired
    │   ├── PayloadTooLargeError          413 payload_too_large
    │   ├── RateLimitedError              429 rate_limited
    │   ├── InternalServerError           500 internal_error
    │   └── DatabaseUnavailableError      503 database_unavailable
    └── LakeStateError                    the Iceberg tables contradict what was asked; raised
        │                                 instead of returning data that could be wrong
        ├── SnapshotNotFoundError         a snapshot the service answered is not in the table
        ├── NotAppendOnlyError            read_changes over snapshots that rewrote or deleted
        ├── UnsupportedSchemaError        a type or layout the plugin cannot write or read safely
        └── SinkCommitConflictError       the sink's commit history contradicts the barrier

A server error with a code this module does not know is raised as the class for its HTTP status
(for example a new 409 code becomes :class:`ConflictError`), so ``except`` clauses written today
keep working when the server grows new codes.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "APIError",
    "AuthenticationError",
    "BarrierNotCompleteError",
    "BarrierRegressionError",
    "CatchingUpError",
    "ConcurrentUpdateError",
    "ConflictError",
    "CycleError",
    "DatabaseUnavailableError",
    "InternalServerError",
    "InvalidRequestError",
    "JobNotPlannedError",
    "JobNotRunningError",
    "LakeStateError",
    "MetaServiceError",
    "NoVersionError",
    "NotAppendOnlyError",
    "NotASinkError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "SinkCommitConflictError",
    "SnapshotExpiredError",
    "SnapshotNotFoundError",
    "TableHasWriterError",
    "TransportError",
    "UnknownBarrierError",
    "UnknownJobError",
    "UnknownLeaseError",
    "UnknownTableError",
    "UnsupportedSchemaError",
    "error_from_response",
]


class MetaServiceError(Exception):
    """Root of every error raised by ``spark_plugin``."""


class TransportError(MetaServiceError):
    """The service could not be reached or gave no usable answer (after the retries allowed).

    The underlying ``httpx`` exception, if any, is chained as ``__cause__``. Whether the request
    reached the server is unknown: repeat it only if it is idempotent.
    """


class APIError(MetaServiceError):
    """The server answered with an error.

    Attributes:
        status_code: the HTTP status.
        code: the machine-readable code of SPEC §9 (``"table_has_writer"``, ...).
        message: the server's human-readable message.
        details: the server's ``details`` object (may be empty).
    """

    status_code: int = 0
    code: str = ""

    def __init__(self, message: str, *, status_code: int | None = None, code: str | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code
        if code is not None:
            self.code = code
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return f"[{self.status_code} {self.code}] {self.message}"


class InvalidRequestError(APIError):
    status_code, code = 422, "invalid_request"


class AuthenticationError(APIError):
    status_code, code = 401, "unauthorized"


class PermissionDeniedError(APIError):
    status_code, code = 403, "forbidden"


class NotFoundError(APIError):
    status_code, code = 404, "not_found"


class UnknownJobError(NotFoundError):
    code = "unknown_job"


class UnknownTableError(NotFoundError):
    code = "unknown_table"


class NoVersionError(NotFoundError):
    code = "no_version"


class CatchingUpError(NotFoundError):
    code = "catching_up"


class UnknownLeaseError(NotFoundError):
    code = "unknown_lease"


class ConflictError(APIError):
    status_code, code = 409, "conflict"


class TableHasWriterError(ConflictError):
    code = "table_has_writer"


class CycleError(ConflictError):
    """The topology would contain a cycle; ``path`` lists it (table, job, table, ...)."""

    code = "cycle"

    @property
    def path(self) -> list[str]:
        return list(self.details.get("path", []))


class BarrierRegressionError(ConflictError):
    code = "barrier_regression"


class UnknownBarrierError(ConflictError):
    code = "unknown_barrier"


class NotASinkError(ConflictError):
    code = "not_a_sink"


class JobNotRunningError(ConflictError):
    code = "job_not_running"


class JobNotPlannedError(ConflictError):
    code = "job_not_planned"


class BarrierNotCompleteError(ConflictError):
    """An explicit barrier is not complete yet; ``tables`` names the tables behind it."""

    code = "barrier_not_complete"

    @property
    def tables(self) -> list[str]:
        return list(self.details.get("tables", []))


class ConcurrentUpdateError(ConflictError):
    """The server lost a compare-and-swap race it could not resolve; repeating is safe."""

    code = "concurrent_update"


class SnapshotExpiredError(APIError):
    status_code, code = 410, "snapshot_expired"


class PayloadTooLargeError(APIError):
    status_code, code = 413, "payload_too_large"


class RateLimitedError(APIError):
    status_code, code = 429, "rate_limited"


class InternalServerError(APIError):
    status_code, code = 500, "internal_error"


class DatabaseUnavailableError(APIError):
    status_code, code = 503, "database_unavailable"


class LakeStateError(MetaServiceError):
    """The Iceberg side contradicts the request; raised rather than returning wrong data."""


class SnapshotNotFoundError(LakeStateError):
    """A snapshot the service handed out is not (or no longer) in the Iceberg table."""


class NotAppendOnlyError(LakeStateError):
    """Rows appended between two snapshots are asked for, but a snapshot in between rewrote or
    deleted data (an overwrite, delete or replace), or the older snapshot is not an ancestor of
    the newer one: the appended rows alone would not describe the change. Read the full
    snapshot instead."""


class UnsupportedSchemaError(LakeStateError):
    """A column type, nullability or layout the plugin cannot write or read without risk."""


class SinkCommitConflictError(LakeStateError):
    """The sink already holds a commit of this job for a later barrier on its current lineage,
    or another writer keeps committing concurrently."""


_BY_CODE: dict[str, type[APIError]] = {
    cls.code: cls
    for cls in (
        InvalidRequestError, AuthenticationError, PermissionDeniedError, NotFoundError,
        UnknownJobError, UnknownTableError, NoVersionError, CatchingUpError, UnknownLeaseError,
        TableHasWriterError, CycleError, BarrierRegressionError, UnknownBarrierError,
        NotASinkError, JobNotRunningError, JobNotPlannedError, BarrierNotCompleteError,
        ConcurrentUpdateError, SnapshotExpiredError, PayloadTooLargeError, RateLimitedError,
        InternalServerError, DatabaseUnavailableError,
    )
}

_BY_STATUS: dict[int, type[APIError]] = {
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    410: SnapshotExpiredError,
    413: PayloadTooLargeError,
    422: InvalidRequestError,
    429: RateLimitedError,
    500: InternalServerError,
    503: DatabaseUnavailableError,
}


def error_from_response(status_code: int, body: Any, text: str = "") -> APIError:
    """The exception for one error response: by ``error.code``, else by HTTP status.

    ``body`` is the decoded JSON (or ``None`` when the body was not JSON, e.g. from a proxy);
    ``text`` is the raw body, used (truncated) as the message in that case.
    """
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = str(error.get("code") or "")
        message = str(error.get("message") or code or f"HTTP {status_code}")
        details = error.get("details") if isinstance(error.get("details"), dict) else {}
    else:
        code, message, details = "", (text.strip()[:200] or f"HTTP {status_code}"), {}
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = _BY_STATUS.get(status_code, APIError)
    return cls(message, status_code=status_code, code=code or cls.code or f"http_{status_code}",
               details=details)
