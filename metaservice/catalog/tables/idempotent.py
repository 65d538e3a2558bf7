"""A table or view mutation of the catalog under its ``Idempotency-Key`` (HTTP only; the key's
rules are ``idempotency.py``): run once, its first outcome replayed to a retry of the same
request. An outcome is a metadata file (a table's or a view's answer, loaded again), an answer
kept whole (``body``: a scan plan's), an empty answer, or a final refusal (``error``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from metaservice.catalog import idempotency
from metaservice.catalog.deps import principal, site
from metaservice.catalog.error_rendering import iceberg_error_response
from metaservice.catalog.errors import (
    IDEMPOTENCY_KEY_REUSED,
    CommitFailedError,
    IcebergError,
    RefusedError,
)
from metaservice.catalog.tables import service as tables
from metaservice.catalog.tables.answers import table_response
from metaservice.context import ServiceContext
from metaservice.db.session import Database
from metaservice.errors import MetaServiceError

logger = logging.getLogger(__name__)

KEY_HEADER = "idempotency-key"  # (Starlette's headers are case-insensitive)


def idempotent(request: Request, database: Database, ctx: ServiceContext, operation: str,
               status: int, run: Callable[[idempotency.Guard | None], Response],
               body: BaseModel | None = None, *, run_reads_key: bool = False,
               load: Callable[[str], Response] | None = None) -> Response:
    """Run a mutation under its ``Idempotency-Key`` (if the request has one): a key already
    finished answers its first outcome to the same request (operation, path, query and
    ``body``, the request's validated body), and refuses any other use of it (422).

    The key is read here first, unless ``run_reads_key``: the mutation (a commit) reads it in
    its own read phase (``Guard.look``), and records a final refusal in its own write
    transaction (``Guard.keep_refusal``). ``load``: the answer of an outcome's
    ``metadata-location`` (a view's; a table's by default)."""
    key = request.headers.get(KEY_HEADER)
    if key is None:
        return run(None)
    path = request.url.path
    document = None if body is None else body.model_dump(mode="json", by_alias=True)
    one = idempotency.guard(
        key, principal(request).name, operation, target=path,
        digest=idempotency.request_digest(request.method, path,
                                          request.query_params.multi_items(), document),
        now_ms=ctx.clock.now_ms(), lifetime_seconds=ctx.settings.idempotency_key_seconds,
        status=status, final_refusal=_final_refusal)
    if not run_reads_key:
        replayed = replay(request, database, one, load)
        if replayed is not None:
            return replayed
    try:
        response = run(one)
    except idempotency.Replay as claimed:
        replayed = (answer(request, one, claimed.stored, load) if claimed.stored is not None
                    else replay(request, database, one, load))
        if replayed is None:  # claimed, then expired in between: nothing to answer with
            raise CommitFailedError("the Idempotency-Key expired while in use; retry with a "
                                    "new key") from None
        return replayed
    except CommitFailedError:
        # A request racing the key's first use can read the table after that use committed:
        # its requirements then fail before it ever claims the key. The key's outcome, if it
        # has one now, is the answer; a lost race of a key nobody finished is not final.
        replayed = replay(request, database, one, load)
        if replayed is not None:
            return replayed
        raise
    except (IcebergError, MetaServiceError) as exc:
        refusal = _final_refusal(exc)
        if refusal is not None and not one.recorded:
            with database.transaction(write=True) as session:
                idempotency.record(session, one, refusal[0], {"error": refusal[1]})
        raise
    if not one.claimed:  # nothing was written: the outcome is recorded on its own
        with database.transaction(write=True) as session:
            idempotency.record(session, one, response.status_code, one.outcome)
    return response


def _final_refusal(exc: Exception) -> tuple[int, dict[str, Any]] | None:
    """The status and body of a refusal the same request would meet again (a lost race is
    not one)."""
    if isinstance(exc, CommitFailedError):
        return None
    rendered = iceberg_error_response(exc)
    if rendered.status_code not in idempotency.FINAL_ERROR_STATUSES:
        return None
    return rendered.status_code, json.loads(bytes(rendered.body))


def replay(request: Request, database: Database, one: idempotency.Guard,
           load: Callable[[str], Response] | None = None) -> Response | None:
    """The answer of the key's outcome, read now; None when it has none."""
    with database.transaction(write=False) as session:
        found = idempotency.stored(session, one)
    return None if found is None else answer(request, one, found, load)


def answer(request: Request, one: idempotency.Guard, found: idempotency.Stored,
           load: Callable[[str], Response] | None = None) -> Response:
    """The key's outcome as the answer to ``one``'s request (``load``: the answer of its
    ``metadata-location``, a table's by default; a ``body`` as it was answered).

    Raises:
        RefusedError: the key was used for another request (422).
    """
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
    if "body" in found.outcome:
        return JSONResponse(found.outcome["body"], status_code=found.status)
    location = found.outcome.get("metadata-location")
    if location is None:
        return Response(status_code=found.status)
    if load is not None:
        return load(location)
    return table_response(tables.loaded(site(request), location))
