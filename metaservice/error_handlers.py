"""The one place that renders every error as SPEC §9 JSON, installed on the app by
``create_app``.

Domain errors (``metaservice/errors.py``) carry their own status and code; the framework's own
errors (unknown route, wrong method, validation) and unexpected exceptions are rendered in the
same shape. Messages never carry a stack trace or database text.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from metaservice.errors import MetaServiceError

logger = logging.getLogger(__name__)

FRAMEWORK_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}
"""The code of each HTTP error the framework raises by itself (an unknown route, a wrong
method, ...)."""

FALLBACK_CODE = "http_error"
"""The code of a framework HTTP error whose status :data:`FRAMEWORK_CODES` does not name."""


def _error_response(status: int, code: str, message: str, details: dict[str, Any] | None = None,
                    headers: Mapping[str, str] | None = None) -> JSONResponse:
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
        code = FRAMEWORK_CODES.get(exc.status_code, FALLBACK_CODE)
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
