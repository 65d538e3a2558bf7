"""What every route of the catalog shares (HTTP only): its path prefix, the Iceberg error
renderer, the app's catalog site and context, the caller, table answers with their ``ETag``,
and mutations under an ``Idempotency-Key``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Annotated

from fastapi import Header, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from metaservice.auth.service import ANONYMOUS_ADMIN, Principal
from metaservice.catalog import idempotency
from metaservice.catalog.errors import (
    IDEMPOTENCY_KEY_REUSED,
    CommitFailedError,
    IcebergError,
    RefusedError,
    iceberg_body,
)
from metaservice.catalog.site import CatalogSite
from metaservice.catalog.tables import service as tables
from metaservice.catalog.tables.service import LoadedTable, NotModified, etag_matches
from metaservice.context import ServiceContext
from metaservice.db.engine import server_gone
from metaservice.db.session import Database
from metaservice.errors import MetaServiceError

logger = logging.getLogger(__name__)

PREFIX = "/iceberg"
NAMESPACE_SEPARATOR = "\x1f"


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


def site(request: Request) -> CatalogSite:
    return request.app.state.catalog  # type: ignore[no-any-return]


def context(request: Request) -> ServiceContext:
    return request.app.state.context  # type: ignore[no-any-return]


def levels(namespace: str) -> list[str]:
    return namespace.split(NAMESPACE_SEPARATOR)


def principal(request: Request) -> Principal:
    return getattr(request.state, "principal", None) or ANONYMOUS_ADMIN


def table_response(loaded: LoadedTable | NotModified,
                   if_none_match: str | None = None) -> Response:
    """A table answer with its ``ETag``; 304 with no body when ``If-None-Match`` names it. The
    metadata's JSON comes serialised (``LoadedTable.metadata_json``): the body is put together
    from bytes."""
    if isinstance(loaded, NotModified):
        return Response(status_code=304, headers={"ETag": loaded.etag})
    tag = loaded.etag
    if tag is not None and etag_matches(if_none_match, tag):
        return Response(status_code=304, headers={"ETag": tag})
    parts = [b"{"]
    if loaded.metadata_location is not None:
        parts += [b'"metadata-location":', json.dumps(loaded.metadata_location).encode(), b","]
    parts += [b'"metadata":', loaded.metadata_json, b',"config":{}}']
    return Response(b"".join(parts), media_type="application/json",
                    headers={"ETag": tag} if tag is not None else None)


IfNoneMatch = Annotated[str | None, Header(alias="If-None-Match", max_length=2000)]


def idempotent(request: Request, database: Database, ctx: ServiceContext, operation: str,
               status: int, run: Callable[[idempotency.Guard | None], Response],
               body: BaseModel | None = None) -> Response:
    """Run a mutation under its ``Idempotency-Key`` (if the request has one): a key already
    finished answers its first outcome to the same request (operation, path, query and
    ``body``, the request's validated body), and refuses any other use of it (422)."""
    key = request.headers.get("idempotency-key")
    if key is None:
        return run(None)
    path = request.url.path
    document = None if body is None else body.model_dump(mode="json", by_alias=True)
    one = idempotency.guard(
        key, principal(request).name, operation, target=path,
        digest=idempotency.request_digest(request.method, path,
                                          request.query_params.multi_items(), document),
        now_ms=ctx.clock.now_ms(), lifetime_seconds=ctx.settings.idempotency_key_seconds,
        status=status)
    replayed = replay(request, database, one)
    if replayed is not None:
        return replayed
    try:
        response = run(one)
    except idempotency.Replay:
        replayed = replay(request, database, one)
        if replayed is None:  # claimed, then expired in between: nothing to answer with
            raise CommitFailedError("the Idempotency-Key expired while in use; retry with a "
                                    "new key") from None
        return replayed
    except CommitFailedError:
        # A request racing the key's first use can read the table after that use committed:
        # its requirements then fail before it ever claims the key. The key's outcome, if it
        # has one now, is the answer; a lost race of a key nobody finished is not final.
        replayed = replay(request, database, one)
        if replayed is not None:
            return replayed
        raise
    except (IcebergError, MetaServiceError) as exc:
        answer = iceberg_error_response(exc)
        if answer.status_code in idempotency.FINAL_ERROR_STATUSES:
            with database.transaction(write=True) as session:
                idempotency.record(session, one, answer.status_code,
                                   {"error": json.loads(answer.body)})
        raise
    if not one.claimed:  # nothing was written: the outcome is recorded on its own
        with database.transaction(write=True) as session:
            idempotency.record(session, one, response.status_code, one.outcome)
    return response


def replay(request: Request, database: Database, one: idempotency.Guard) -> Response | None:
    with database.transaction(write=False) as session:
        found = idempotency.stored(session, one)
    if found is None:
        return None
    if not found.answers(one):
        used_for = found.operation if found.target is None else (
            f"{found.operation} of {found.target}")
        raise RefusedError(
            IDEMPOTENCY_KEY_REUSED,
            f"Idempotency-Key {one.key} was used for another request ({used_for}); it is "
            "replayed only to the same operation on the same path with the same body: use a "
            "new key for each request",
            {"operation": found.operation, "target": found.target}, status_code=422)
    logger.info("catalog_idempotent_replay", extra={"operation": one.operation})
    if "error" in found.outcome:
        return JSONResponse(found.outcome["error"], status_code=found.status)
    location = found.outcome.get("metadata-location")
    if location is None:
        return Response(status_code=found.status)
    return table_response(tables.loaded(site(request), location))
