"""The Iceberg error renderer of the catalog's routes: any error of a request under
``/iceberg`` (``errors.py``'s, MetaService's refusals, validation, routing, the database), in
the Iceberg error model. ``error_handlers.render_errors_under`` applies it (``endpoints.py``)."""

from __future__ import annotations

import logging

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from metaservice.catalog.errors import IcebergError, RefusedError, iceberg_body
from metaservice.db.engine import server_gone
from metaservice.errors import MetaServiceError

logger = logging.getLogger(__name__)


def iceberg_error_response(exc: Exception) -> JSONResponse:
    """Any error of a catalog route, in the Iceberg error model."""
    if isinstance(exc, IcebergError):
        return JSONResponse(exc.to_body(), status_code=exc.status_code, headers=exc.headers)
    if isinstance(exc, MetaServiceError):
        refusal = RefusedError.from_domain(exc)
        return JSONResponse(refusal.to_body(), status_code=refusal.status_code,
                            headers=exc.headers)
    if isinstance(exc, (RequestValidationError, ValidationError)):
        problems = exc.errors()
        first = problems[0] if problems else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return JSONResponse(iceberg_body(400, f"{where}: {first['msg']}"), status_code=400)
    if isinstance(exc, StarletteHTTPException):
        return JSONResponse(iceberg_body(exc.status_code, str(exc.detail)),
                            status_code=exc.status_code, headers=exc.headers)
    if isinstance(exc, OperationalError) or (
            isinstance(exc, DBAPIError) and (exc.connection_invalidated or server_gone(exc.orig))):
        logger.warning("database_error", extra={"error_class": type(exc.orig).__name__})
        return JSONResponse(iceberg_body(503, "the database is unavailable or busy; retry later"),
                            status_code=503, headers={"Retry-After": "1"})
    logger.exception("unhandled_error", exc_info=exc)
    return JSONResponse(iceberg_body(500, "internal error", "InternalServerError"),
                        status_code=500)
