"""The one place that renders every error as JSON in the error shape of docs/contract.md#errors,
installed on the app by ``create_app``.

Domain errors (``metaservice/errors.py``) carry their own status and code; the framework's own
errors (unknown route, wrong method, validation) and unexpected exceptions are rendered in the
same shape. Messages never carry a stack trace or database text.

A part of the API served under a path prefix in another error model (the Iceberg REST catalog
under ``/iceberg``) registers its renderer with :func:`render_errors_under`: every handler here
asks, at request time, whether a renderer owns the request's path, so the order in which the
app installs the handlers and the renderers does not matter.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import get_route_path

from metaservice.db.engine import server_gone
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


ErrorRenderer = Callable[[Exception], Response]
"""Renders any error of a request in one error model."""

Handler = Callable[[Request, Any], Awaitable[Response]]


def render_errors_under(app: FastAPI, prefix: str, render: ErrorRenderer,
                        *exception_classes: type[Exception]) -> None:
    """Render every error of a request under ``prefix`` (``/iceberg``: its paths start with
    ``/iceberg/``) with ``render``, whichever handler catches it. ``exception_classes``: errors
    only that part raises, caught (under any other path, they are unexpected: a 500)."""
    renderers = getattr(app.state, "error_renderers", None)
    if renderers is None:
        renderers = app.state.error_renderers = {}
    renderers[prefix.rstrip("/") + "/"] = render
    for exc_class in exception_classes:
        app.add_exception_handler(exc_class, _dispatching(_unexpected))


def _renderer_for(request: Request) -> ErrorRenderer | None:
    renderers: dict[str, ErrorRenderer] = getattr(request.app.state, "error_renderers", None) or {}
    path = get_route_path(request.scope)  # within the app: behind a proxy's root_path too
    for prefix, render in renderers.items():
        if path.startswith(prefix):
            return render
    return None


def _dispatching(default: Callable[[Request, Any], Response]) -> Handler:
    """A handler that leaves a request to its prefix's renderer, if one owns its path."""
    async def handle(request: Request, exc: Exception) -> Response:
        render = _renderer_for(request)
        return render(exc) if render is not None else default(request, exc)
    return handle


def _domain(_: Request, exc: MetaServiceError) -> Response:
    return JSONResponse(status_code=exc.status_code, content=exc.to_body(), headers=exc.headers)


def _validation(_: Request, exc: RequestValidationError) -> Response:
    details = _validation_details(exc)
    first = details["problems"][0] if details["problems"] else {"message": "invalid"}
    where = ".".join(first.get("location", [])[1:]) or "request"
    return _error_response(422, "invalid_request", f"{where}: {first['message']}", details)


def _http(_: Request, exc: StarletteHTTPException) -> Response:
    code = FRAMEWORK_CODES.get(exc.status_code, FALLBACK_CODE)
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    return _error_response(exc.status_code, code, message, headers=exc.headers)


def _db_unavailable(_: Request, exc: OperationalError) -> Response:
    logger.warning("database_error", extra={"error_class": type(exc.orig).__name__})
    return _error_response(503, "database_unavailable",
                           "the database is unavailable or busy; retry later",
                           headers={"Retry-After": "1"})


def _db_error(request: Request, exc: DBAPIError) -> Response:
    if exc.connection_invalidated or server_gone(exc.orig):
        # the server went away or stopped taking writes (a demoted primary): as unavailable
        return _db_unavailable(request, exc)  # type: ignore[arg-type]
    logger.error("database_error", extra={"error_class": type(exc.orig).__name__})
    return _error_response(500, "internal_error", "internal error")


def _unexpected(_: Request, exc: Exception) -> Response:
    logger.exception("unhandled_error", exc_info=exc)
    return _error_response(500, "internal_error", "internal error")


def install_error_handlers(app: FastAPI) -> None:
    """Render every error, ours or the framework's, in the error shape of docs/contract.md#errors
    (or in the model of the renderer that owns the request's path)."""
    handlers: list[tuple[type[Exception], Callable[[Request, Any], Response]]] = [
        (MetaServiceError, _domain), (RequestValidationError, _validation),
        (StarletteHTTPException, _http), (OperationalError, _db_unavailable),
        (DBAPIError, _db_error), (Exception, _unexpected)]
    for exc_class, handler in handlers:
        app.add_exception_handler(exc_class, _dispatching(handler))
