"""Domain errors and the one place that renders every error as SPEC §9 JSON.

Every error the service returns looks like::

    {"error": {"code": "table_has_writer", "message": "...", "details": {...}}}

Domain code raises a subclass of :class:`MetaServiceError`; the framework's own errors
(unknown route, wrong method, validation) and unexpected exceptions are rendered in the same
shape. Messages never carry a stack trace or database text.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger(__name__)


class MetaServiceError(Exception):
    """Root of every error the service reports to a client."""

    status_code: ClassVar[int] = 400
    code: ClassVar[str] = "bad_request"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.headers: dict[str, str] | None = None

    def to_body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


class InvalidRequestError(MetaServiceError):
    status_code = 422
    code = "invalid_request"


class UnknownJobError(MetaServiceError):
    status_code = 404
    code = "unknown_job"


class UnknownTableError(MetaServiceError):
    status_code = 404
    code = "unknown_table"


class NoVersionError(MetaServiceError):
    status_code = 404
    code = "no_version"


class CatchingUpError(MetaServiceError):
    status_code = 404
    code = "catching_up"


class TableHasWriterError(MetaServiceError):
    status_code = 409
    code = "table_has_writer"


class CycleError(MetaServiceError):
    status_code = 409
    code = "cycle"


class BarrierRegressionError(MetaServiceError):
    status_code = 409
    code = "barrier_regression"


class UnknownBarrierError(MetaServiceError):
    status_code = 409
    code = "unknown_barrier"


class NotASinkError(MetaServiceError):
    status_code = 409
    code = "not_a_sink"


class JobNotRunningError(MetaServiceError):
    status_code = 409
    code = "job_not_running"


class JobNotPlannedError(MetaServiceError):
    status_code = 409
    code = "job_not_planned"


class BarrierNotCompleteError(MetaServiceError):
    status_code = 409
    code = "barrier_not_complete"


class BarrierNotExactError(MetaServiceError):
    """Some table completed the barrier's neighbourhood but is not exact at it (SPEC §2, §4):
    its snapshot there would mix two points of the source data."""

    status_code = 409
    code = "barrier_not_exact"


class BarrierInFutureError(MetaServiceError):
    """A barrier beyond the server's clock plus the configured bound (SPEC §2)."""

    status_code = 422
    code = "barrier_in_future"


class SnapshotExpiredError(MetaServiceError):
    status_code = 410
    code = "snapshot_expired"


class UnknownSnapshotError(MetaServiceError):
    """A snapshot that completes no barrier of its table (never reported, or rolled back)."""

    status_code = 404
    code = "unknown_snapshot"


class UnknownLeaseError(MetaServiceError):
    status_code = 404
    code = "unknown_lease"


class LeaseExpiredError(MetaServiceError):
    """The lease ran out: it no longer protects anything and cannot be renewed."""

    status_code = 410
    code = "lease_expired"


class UnknownExpirationError(MetaServiceError):
    status_code = 404
    code = "unknown_expiration"


class SnapshotNotApprovedError(MetaServiceError):
    """An expiration reported as done a snapshot that was never approved for expiration."""

    status_code = 409
    code = "snapshot_not_approved"


class DatabaseUnavailableError(MetaServiceError):
    status_code = 503
    code = "database_unavailable"


class ConcurrentUpdateError(MetaServiceError):
    """A compare-and-swap lost a race it cannot resolve by itself; the client may retry."""

    status_code = 409
    code = "concurrent_update"


class RollbackInProgressError(MetaServiceError):
    """The table is fenced by an applied rollback plan until the plan is completed."""

    status_code = 409
    code = "rollback_in_progress"


class BarrierRolledBackError(MetaServiceError):
    """The barrier was invalidated by a rollback: the job discards its work and asks again."""

    status_code = 409
    code = "barrier_rolled_back"


class UnknownRollbackPlanError(MetaServiceError):
    status_code = 404
    code = "unknown_rollback_plan"


class RollbackPlanOutdatedError(MetaServiceError):
    """The topology or the targets changed since the plan was made: make a new plan."""

    status_code = 409
    code = "rollback_plan_outdated"


class RollbackPlanNotAppliedError(MetaServiceError):
    status_code = 409
    code = "rollback_plan_not_applied"


_FRAMEWORK_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}


def _error_response(status: int, code: str, message: str, details: dict[str, Any] | None = None,
                    headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        status_code=status,
        content={"error": {"code": code, "message": message, "details": details or {}}},
        headers=headers,
    )


def _validation_details(exc: RequestValidationError) -> dict[str, Any]:
    problems = []
    for err in exc.errors():
        problem: dict[str, Any] = {
            "location": [str(p) for p in err.get("loc", ())],
            "message": err.get("msg", ""),
        }
        ctx = err.get("ctx") or {}
        if "expected" in ctx:
            problem["expected"] = str(ctx["expected"])
        if "pattern" in ctx:
            problem["pattern"] = str(ctx["pattern"])
        problems.append(problem)
    return {"problems": problems}


def install_error_handlers(app: FastAPI) -> None:
    """Render every error, ours or the framework's, in the SPEC §9 shape."""

    @app.exception_handler(MetaServiceError)
    async def _domain(_: Request, exc: MetaServiceError) -> JSONResponse:
        return JSONResponse(status_code=exc.status_code, content=exc.to_body(),
                            headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = _validation_details(exc)
        first = details["problems"][0] if details["problems"] else {"message": "invalid"}
        where = ".".join(first.get("location", [])[1:]) or "request"
        return _error_response(422, "invalid_request", f"{where}: {first['message']}", details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _FRAMEWORK_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return _error_response(exc.status_code, code, message, headers=exc.headers)

    @app.exception_handler(OperationalError)
    async def _db_unavailable(_: Request, exc: OperationalError) -> JSONResponse:
        logger.warning("database_error", extra={"error_class": type(exc.orig).__name__})
        return _error_response(503, "database_unavailable",
                               "the database is unavailable or busy; retry later",
                               headers={"Retry-After": "1"})

    @app.exception_handler(DBAPIError)
    async def _db_error(_: Request, exc: DBAPIError) -> JSONResponse:
        logger.error("database_error", extra={"error_class": type(exc.orig).__name__})
        return _error_response(500, "internal_error", "internal error")

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled_error")
        return _error_response(500, "internal_error", "internal error")
