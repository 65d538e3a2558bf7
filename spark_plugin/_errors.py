"""Every exception the plugin raises, under one root.

The tree::

    MetaServiceError                         root: catch this to catch everything below
    ├── TransportError                       no usable answer: refused, timed out, bad body
    ├── APIError                             the server answered an error (docs/contract.md#errors)
    │   ├── BadRequestError                  400 bad_request
    │   ├── AuthenticationError              401 unauthorized
    │   ├── PermissionDeniedError            403 forbidden
    │   │   └── NotTableOwnerError           403 not_table_owner (the catalog)
    │   ├── NotFoundError                    404 (not_found: unknown route)
    │   │   ├── UnknownJobError              404 unknown_job
    │   │   ├── UnknownTableError            404 unknown_table
    │   │   ├── NoVersionError               404 no_version
    │   │   ├── CatchingUpError              404 catching_up
    │   │   ├── UnknownSnapshotError         404 unknown_snapshot
    │   │   ├── UnknownLeaseError            404 unknown_lease
    │   │   ├── UnknownExpirationError       404 unknown_expiration
    │   │   ├── UnknownRollbackPlanError     404 unknown_rollback_plan
    │   │   └── UnknownTokenError            404 unknown_token
    │   ├── MethodNotAllowedError            405 method_not_allowed
    │   ├── ConflictError                    409
    │   │   ├── TableHasWriterError          409 table_has_writer
    │   │   ├── CycleError                   409 cycle (.path)
    │   │   ├── BarrierRegressionError       409 barrier_regression
    │   │   ├── UnknownBarrierError          409 unknown_barrier
    │   │   ├── NotASinkError                409 not_a_sink
    │   │   ├── JobNotRunningError           409 job_not_running
    │   │   ├── JobNotPlannedError           409 job_not_planned
    │   │   ├── BarrierNotCompleteError      409 barrier_not_complete (.tables)
    │   │   ├── BarrierNotExactError         409 barrier_not_exact (.tables, .nearest)
    │   │   ├── ConcurrentUpdateError        409 concurrent_update (repeated when idempotent)
    │   │   ├── SnapshotNotApprovedError     409 snapshot_not_approved
    │   │   ├── SnapshotProtectedError       409 snapshot_protected (catalog commits)
    │   │   ├── BarrierRolledBackError       409 barrier_rolled_back
    │   │   ├── RollbackInProgressError      409 rollback_in_progress (repeated: retry_after_ms)
    │   │   ├── RollbackPlanOutdatedError    409 rollback_plan_outdated
    │   │   ├── HeldByCatalogError           409 held_by_catalog
    │   │   ├── RollbackPlanNotAppliedError  409 rollback_plan_not_applied
    │   │   ├── TokenExistsError             409 token_exists
    │   │   └── LastAdminError               409 last_admin
    │   ├── GoneError                        410: it existed and will not come back
    │   │   ├── SnapshotExpiredError         410 snapshot_expired
    │   │   └── LeaseExpiredError            410 lease_expired
    │   ├── PayloadTooLargeError             413 payload_too_large
    │   ├── UnsupportedMediaTypeError        415 unsupported_media_type
    │   ├── InvalidRequestError              422 invalid_request
    │   │   ├── BarrierInFutureError         422 barrier_in_future
    │   │   └── LeaseTermTooLongError        422 lease_term_too_long
    │   ├── RateLimitedError                 429 rate_limited (repeated)
    │   ├── TooManyLeasesError               429 too_many_leases
    │   ├── InternalServerError              500 internal_error
    │   └── ServiceUnavailableError          503 (repeated)
    │       ├── DatabaseUnavailableError     503 database_unavailable
    │       └── NotMigratedError             503 not_migrated (``/readyz``)
    ├── LakeStateError                       the Iceberg tables contradict what was asked; raised
    │   │                                    instead of returning data that could be wrong
    │   ├── SnapshotNotFoundError            a snapshot the service answered is not in the table
    │   ├── NotAppendOnlyError               read_changes over snapshots that rewrote or deleted
    │   ├── UnsupportedSchemaError           a type or layout not safe to write or read
    │   └── SinkCommitConflictError          the sink's commit history contradicts the barrier
    ├── RollbackNotIncrementalError          a full rollback plan: rebuild instead (.tables)
    ├── OptionError                          a bad option of format("metaservice"); a ValueError
    ├── CatalogConfigError                   a catalog pyiceberg cannot open; a ValueError
    ├── WorkerImportError                    Spark's workers cannot import the plugin
    └── StreamStateError                     a streaming query's checkpoint or options contradict
                                             its job on the service; a RuntimeError

"(repeated)": the client repeats the call by itself (up to ``max_retries``, honouring
``Retry-After`` and ``retry_after_ms``) because the server refused it without acting, and raises
the error only when the repetitions are spent (see ``spark_plugin._client``).

A server error with a code this module does not know is raised as the class for its HTTP status
(for example a new 409 code becomes :class:`ConflictError`), so ``except`` clauses written today
keep working when the server grows new codes. ``http_error``, the code of a framework error whose
status has no code of its own, is likewise raised as the class for its status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "APIError",
    "AuthenticationError",
    "BadRequestError",
    "BarrierInFutureError",
    "BarrierNotCompleteError",
    "BarrierNotExactError",
    "BarrierRegressionError",
    "BarrierRolledBackError",
    "CatalogConfigError",
    "CatchingUpError",
    "ConcurrentUpdateError",
    "ConflictError",
    "CycleError",
    "DatabaseUnavailableError",
    "GoneError",
    "HeldByCatalogError",
    "InternalServerError",
    "InvalidRequestError",
    "JobNotPlannedError",
    "JobNotRunningError",
    "LastAdminError",
    "LakeStateError",
    "LeaseExpiredError",
    "LeaseTermTooLongError",
    "MetaServiceError",
    "MethodNotAllowedError",
    "NoVersionError",
    "NotAppendOnlyError",
    "NotASinkError",
    "NotFoundError",
    "NotTableOwnerError",
    "NotMigratedError",
    "OptionError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "RollbackInProgressError",
    "RollbackNotIncrementalError",
    "RollbackPlanNotAppliedError",
    "RollbackPlanOutdatedError",
    "ServiceUnavailableError",
    "SinkCommitConflictError",
    "SnapshotExpiredError",
    "SnapshotNotApprovedError",
    "SnapshotNotFoundError",
    "SnapshotProtectedError",
    "StreamStateError",
    "TableHasWriterError",
    "TokenExistsError",
    "TooManyLeasesError",
    "TransportError",
    "UnknownBarrierError",
    "UnknownExpirationError",
    "UnknownJobError",
    "UnknownLeaseError",
    "UnknownRollbackPlanError",
    "UnknownSnapshotError",
    "UnknownTableError",
    "UnknownTokenError",
    "UnsupportedMediaTypeError",
    "UnsupportedSchemaError",
    "WorkerImportError",
]


class MetaServiceError(Exception):
    """Root of every error raised by ``spark_plugin``."""


class TransportError(MetaServiceError):
    """The service could not be reached or gave no usable answer (after the retries allowed).

    The underlying ``httpx`` exception, if any, is chained as ``__cause__``. Whether the request
    reached the server is unknown: repeat it only if it is idempotent.
    """


# -- the server's answers (docs/contract.md#errors-security-and-operations) ------------------------


class APIError(MetaServiceError):
    """The server answered with an error.

    Attributes:
        status_code: the HTTP status.
        code: the machine-readable code of docs/contract.md#errors (``"table_has_writer"``, ...).
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


class BadRequestError(APIError):
    status_code, code = 400, "bad_request"


class AuthenticationError(APIError):
    status_code, code = 401, "unauthorized"


class PermissionDeniedError(APIError):
    status_code, code = 403, "forbidden"


class NotTableOwnerError(PermissionDeniedError):
    """Only the token that registered a table's running writer (or an admin's maintenance)
    changes the table (the catalog's trust rules, docs/contract.md#commits-through-the-catalog)."""

    status_code, code = 403, "not_table_owner"


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


class UnknownSnapshotError(NotFoundError):
    """The snapshot completes no barrier of its table (never reported, or rolled back)."""

    code = "unknown_snapshot"


class UnknownLeaseError(NotFoundError):
    code = "unknown_lease"


class UnknownExpirationError(NotFoundError):
    code = "unknown_expiration"


class UnknownRollbackPlanError(NotFoundError):
    code = "unknown_rollback_plan"


class UnknownTokenError(NotFoundError):
    code = "unknown_token"


class MethodNotAllowedError(APIError):
    status_code, code = 405, "method_not_allowed"


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


class BarrierNotExactError(ConflictError):
    """Some table completed the barrier's neighbourhood but no snapshot of it is exact at the
    barrier (docs/contract.md#exactness): reading it there would mix two points of the source data.
    ``tables`` names them; ``nearest`` maps each to the exact barriers around it,
    ``{"below": b1 | None, "above": b2 | None}``."""

    code = "barrier_not_exact"

    @property
    def tables(self) -> list[str]:
        return list(self.details.get("tables", []))

    @property
    def nearest(self) -> dict[str, dict[str, int | None]]:
        return dict(self.details.get("nearest", {}))


class ConcurrentUpdateError(ConflictError):
    """The server lost a compare-and-swap race it could not resolve; repeating is safe."""

    code = "concurrent_update"


class SnapshotNotApprovedError(ConflictError):
    """An expiration reported as done a snapshot that was never approved for expiration."""

    code = "snapshot_not_approved"


class SnapshotProtectedError(ConflictError):
    """A catalog commit would remove snapshots the service protects (the reasons are in the
    message)."""

    code = "snapshot_protected"


class BarrierRolledBackError(ConflictError):
    """The barrier was invalidated by a rollback: discard the work and ask for the next one."""

    code = "barrier_rolled_back"


class RollbackInProgressError(ConflictError):
    """The table is fenced by an applied rollback plan until the plan is completed. The server
    did not act on the request, so the client repeats any call refused this way (waiting at
    least the answer's ``retry_after_ms``) and raises this only when its retries are spent."""

    code = "rollback_in_progress"


class RollbackPlanOutdatedError(ConflictError):
    """The topology or the targets changed since the plan was made: make a new plan."""

    code = "rollback_plan_outdated"


class HeldByCatalogError(ConflictError):
    """A report of a snapshot of a table the built-in catalog holds that the catalog's commits
    did not record: commit through the catalog (it records the barrier)."""

    status_code, code = 409, "held_by_catalog"


class RollbackPlanNotAppliedError(ConflictError):
    code = "rollback_plan_not_applied"


class TokenExistsError(ConflictError):
    code = "token_exists"


class LastAdminError(ConflictError):
    """The token is the last active admin token: create another admin before revoking it."""

    code = "last_admin"


class GoneError(APIError):
    """The thing asked for existed and will not come back."""

    status_code, code = 410, "gone"


class SnapshotExpiredError(GoneError):
    """The snapshot was approved for expiration: it is never handed out or leased again."""

    code = "snapshot_expired"


class LeaseExpiredError(GoneError):
    """The lease ran out: it no longer protects anything and cannot be renewed."""

    code = "lease_expired"


class PayloadTooLargeError(APIError):
    status_code, code = 413, "payload_too_large"


class UnsupportedMediaTypeError(APIError):
    status_code, code = 415, "unsupported_media_type"


class InvalidRequestError(APIError):
    status_code, code = 422, "invalid_request"


class BarrierInFutureError(InvalidRequestError):
    """The barrier lies beyond the server's clock plus its configured bound
    (docs/contract.md#barriers)."""

    code = "barrier_in_future"


class LeaseTermTooLongError(InvalidRequestError):
    """A lease's term beyond the server's ``METASERVICE_MAX_LEASE_SECONDS``: ask for less and
    renew the lease."""

    code = "lease_term_too_long"


class RateLimitedError(APIError):
    status_code, code = 429, "rate_limited"


class TooManyLeasesError(APIError):
    """The token holds the server's ``METASERVICE_MAX_LEASES`` live leases already: release one
    (or wait until one expires). Not repeated: only a release makes room."""

    status_code, code = 429, "too_many_leases"


class InternalServerError(APIError):
    status_code, code = 500, "internal_error"


class ServiceUnavailableError(APIError):
    """The server cannot serve requests right now and did not act on this one."""

    status_code, code = 503, "service_unavailable"


class DatabaseUnavailableError(ServiceUnavailableError):
    code = "database_unavailable"


class NotMigratedError(ServiceUnavailableError):
    """``/readyz``: the database schema is not at the server's head revision."""

    code = "not_migrated"


# -- the lake --------------------------------------------------------------------------------


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


# -- the plugin's own tools ------------------------------------------------------------------


class RollbackNotIncrementalError(MetaServiceError):
    """The plan is ``full``: some tables cannot be rolled back to a snapshot and must be
    rebuilt. ``tables`` maps each of them to the reason."""

    def __init__(self, message: str, tables: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.tables = dict(tables or {})

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.tables)


class OptionError(MetaServiceError, ValueError):
    """An option of the ``metaservice`` data source is missing or invalid. Also a
    ``ValueError``, as bad arguments are in Python."""


class CatalogConfigError(MetaServiceError, ValueError):
    """The catalog a table names is configured (in Spark's configuration, pyiceberg's, or the
    argument) as a catalog pyiceberg cannot open, e.g. a Hadoop catalog. Also a
    ``ValueError``."""


class WorkerImportError(MetaServiceError, RuntimeError):
    """Spark's Python workers cannot import ``spark_plugin``: they run another interpreter than
    the driver, or another environment. Install the plugin there, or point Spark at an
    interpreter that has it: ``PYSPARK_PYTHON`` in the driver's environment before the
    SparkContext starts (``spark-submit --conf spark.pyspark.python=...`` sets it; the same
    setting on ``SparkSession.builder`` is ignored by pyspark). ``python`` is the workers'
    interpreter and ``reason`` what the import raised there. Also a ``RuntimeError``."""

    def __init__(self, message: str, python: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.python = python
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.python, self.reason)


class StreamStateError(MetaServiceError, RuntimeError):
    """A streaming query's checkpoint or options contradict its job as the service knows it
    (the job was registered again with other sources, the ``table`` or ``checkpointLocation``
    option changed between runs): going on could read or commit the wrong data. Also a
    ``RuntimeError``, as it was before it had a class of its own."""


def _descendants(cls: type[APIError]) -> list[type[APIError]]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_descendants(sub)]
    return found


# Every class above for its code (the status families' generic codes included).
_BY_CODE: dict[str, type[APIError]] = {cls.code: cls for cls in _descendants(APIError)}

_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    409: ConflictError,
    410: GoneError,
    413: PayloadTooLargeError,
    415: UnsupportedMediaTypeError,
    422: InvalidRequestError,
    429: RateLimitedError,
    500: InternalServerError,
    503: ServiceUnavailableError,
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
