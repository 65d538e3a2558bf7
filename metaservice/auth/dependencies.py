"""The app-wide authorisation dependency (the rules are in ``auth/service.py``) and its
``Annotated`` alias for endpoints that act as the caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from metaservice.auth.policy import PUBLIC, Role, required_role
from metaservice.auth.service import (
    ANONYMOUS_ADMIN,
    Principal,
    check_job_owner,
    ensure_role,
    ensure_within_rate,
    unauthenticated,
)


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


# What clients put in the header when their token setting is empty: pyiceberg's RestCatalog
# without token= sends "Bearer None". No token of ours looks like these (they begin "mst_").
_NO_TOKEN_PLACEHOLDERS = frozenset({"None", "null", "undefined"})

_bearer_scheme = HTTPBearer(auto_error=False, description="a MetaService token (mst_…)")


async def authorize(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)] = None,
) -> Principal:
    """The app-wide dependency: authenticate, authorise, rate-limit (the rules are in
    ``auth/service.py``). It runs on the event loop (every request passes here) and leaves it
    only for a query: a token not seen in the last seconds, a writer's job ownership."""
    state = request.app.state
    route = request.scope.get("route")
    needed = required_role(request.method, getattr(route, "path", request.url.path))
    principal: Principal
    if state.settings.auth == "disabled":
        principal = ANONYMOUS_ADMIN
    elif needed == PUBLIC:
        principal = Principal(None, Role.reader)
    else:
        token = _bearer(request)
        if token is None:
            raise unauthenticated("a bearer token is required (Authorization: Bearer …)")
        if token in _NO_TOKEN_PLACEHOLDERS:
            raise unauthenticated(
                f"no token was given: the request says 'Authorization: Bearer {token}', which "
                "a client sends when its token is not set (pyiceberg's RestCatalog without "
                "token=...); pass a MetaService token (mst_…)")
        cached, found = state.token_cache.cached(token)
        if not cached:
            found = await run_in_threadpool(state.token_cache.lookup,
                                            state.database.read_session, token)
        if found is None:
            raise unauthenticated("the token is unknown or revoked")
        principal = found
        assert isinstance(needed, Role)
        ensure_role(principal, needed)
        job = request.path_params.get("job")
        if job is not None and needed == Role.writer and principal.role == Role.writer:
            await run_in_threadpool(check_job_owner, state.database.read_session, job,
                                    principal)
    if state.rate_limiter is not None and needed != PUBLIC:
        ensure_within_rate(state.rate_limiter, principal.name or (
            request.client.host if request.client else "unknown"))
    request.state.principal = principal
    return principal


CurrentPrincipal = Annotated[Principal, Depends(authorize)]
