"""Tokens and the authorisation of each request.

Every request passes :func:`authorize` (an app-wide dependency): it finds the route's required
role (``auth/policy.py``), authenticates the bearer token (only its SHA-256 is stored), checks
the role, checks that a writer acts only on jobs it registered, and applies the optional rate
limit. With ``METASERVICE_AUTH=disabled`` (allowed on loopback only) every caller is an
anonymous admin.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from metaservice import errors
from metaservice.auth.policy import PUBLIC, Role, required_role
from metaservice.auth.tokens import hash_token, new_token
from metaservice.db.models import ApiTokenRow, JobRow
from metaservice.limits import TokenBucket

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Principal:
    """Who is calling: a named token with a role, or anonymous (auth disabled / public route)."""

    name: str | None
    role: Role

    def may(self, role: Role) -> bool:
        return self.role >= role


ANONYMOUS_ADMIN = Principal(None, Role.admin)


# -- token management ---------------------------------------------------------------------


@dataclass(frozen=True)
class CreatedToken:
    name: str
    role: Role
    token: str
    created_at: int


def create_token(session: Session, name: str, role: Role, now_ms: int,
                 token: str | None = None) -> CreatedToken:
    """Create a token; the plain value is returned once and never stored."""
    if session.get(ApiTokenRow, name) is not None:
        raise errors.TokenExistsError(f"a token named {name!r} exists; revoke it first",
                                      name=name)
    token = token or new_token()
    session.add(ApiTokenRow(name=name, role=role.name, token_hash=hash_token(token),
                            created_at=now_ms))
    session.flush()
    logger.info("token_created", extra={"token_name": name, "role": role.name})
    return CreatedToken(name, role, token, now_ms)


def list_tokens(session: Session) -> list[ApiTokenRow]:
    return list(session.scalars(select(ApiTokenRow).order_by(ApiTokenRow.name)))


def revoke_token(session: Session, name: str, now_ms: int) -> ApiTokenRow:
    row = session.get(ApiTokenRow, name)
    if row is None:
        raise errors.UnknownTokenError(f"no token named {name!r}", name=name)
    if row.revoked_at is None:
        row.revoked_at = now_ms
        logger.info("token_revoked", extra={"token_name": name})
    return row


def ensure_bootstrap_admin(session: Session, token: str, now_ms: int) -> None:
    """Make the configured bootstrap admin token valid (``METASERVICE_ADMIN_TOKEN``)."""
    digest = hash_token(token)
    existing = session.scalars(select(ApiTokenRow).where(ApiTokenRow.token_hash == digest)).first()
    if existing is None:
        name = "bootstrap-admin"
        row = session.get(ApiTokenRow, name)
        if row is not None:  # the secret was rotated: replace the old hash
            row.token_hash, row.revoked_at, row.role = digest, None, Role.admin.name
        else:
            session.add(ApiTokenRow(name=name, role=Role.admin.name, token_hash=digest,
                                    created_at=now_ms))


# -- per-request authorisation ------------------------------------------------------------


class TokenCache:
    """Recently verified tokens, so a request costs no extra query; a revocation takes effect
    within ``ttl_seconds`` on every replica."""

    def __init__(self, ttl_seconds: float = 5.0) -> None:
        self.ttl = ttl_seconds
        self._entries: dict[str, tuple[float, Principal | None]] = {}
        self._lock = threading.Lock()

    def cached(self, token: str) -> tuple[bool, Principal | None]:
        """(found, principal) from memory only: no query."""
        with self._lock:
            hit = self._entries.get(hash_token(token))
        if hit is not None and time.monotonic() - hit[0] < self.ttl:
            return True, hit[1]
        return False, None

    def lookup(self, session_factory, token: str) -> Principal | None:  # type: ignore[no-untyped-def]
        found, principal = self.cached(token)
        if found:
            return principal
        digest = hash_token(token)
        now = time.monotonic()
        with session_factory() as session:
            row = session.scalars(
                select(ApiTokenRow).where(ApiTokenRow.token_hash == digest)).first()
            principal = (Principal(row.name, Role[row.role])
                         if row is not None and row.revoked_at is None else None)
        with self._lock:
            if len(self._entries) > 10_000:
                self._entries.clear()
            self._entries[digest] = (now, principal)
        return principal

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


_bearer_scheme = HTTPBearer(auto_error=False, description="a MetaService token (mst_…)")


async def authorize(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)] = None,
) -> Principal:
    """The app-wide dependency: authenticate, authorise, rate-limit. It runs on the event loop
    (every request passes here) and leaves it only for a query: a token not seen in the last
    seconds, a writer's job ownership."""
    state = request.app.state
    settings = state.settings
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    needed = required_role(request.method, path)
    principal: Principal
    if settings.auth == "disabled":
        principal = ANONYMOUS_ADMIN
    elif needed == PUBLIC:
        principal = Principal(None, Role.reader)
    else:
        token = _bearer(request)
        if token is None:
            error = errors.UnauthorizedError(
                "a bearer token is required (Authorization: Bearer …)")
            error.headers = {"WWW-Authenticate": "Bearer"}
            raise error
        cached, found = state.token_cache.cached(token)
        if not cached:
            found = await run_in_threadpool(state.token_cache.lookup,
                                            state.database.read_session, token)
        if found is None:
            error = errors.UnauthorizedError("the token is unknown or revoked")
            error.headers = {"WWW-Authenticate": "Bearer"}
            raise error
        principal = found
        assert isinstance(needed, Role)
        if not principal.may(needed):
            raise errors.ForbiddenError(
                f"this route needs the {needed.name} role; token {principal.name!r} is "
                f"{principal.role.name}", required=needed.name, role=principal.role.name)
        job = request.path_params.get("job")
        if job is not None and needed == Role.writer and principal.role == Role.writer:
            await run_in_threadpool(_check_job_owner, state, job, principal)
    limiter: TokenBucket | None = state.rate_limiter
    if limiter is not None and needed != PUBLIC:
        key = principal.name or (request.client.host if request.client else "unknown")
        allowed, wait = limiter.allow(key)
        if not allowed:
            error = errors.RateLimitedError("rate limit exceeded; slow down",
                                            retry_after_seconds=round(wait, 3))
            error.headers = {"Retry-After": str(max(1, round(wait)))}
            raise error
    request.state.principal = principal
    return principal


def ensure_may_act_on_job(principal: Principal, job: str, owner: str | None) -> None:
    """A writer acts only on jobs it registered (SPEC §9); an admin (and every caller when
    authentication is off) on any job. A job registered with authentication off has no owner."""
    if principal.role == Role.writer and owner is not None and owner != principal.name:
        raise errors.ForbiddenError(f"job {job!r} was registered by another token", job=job)


def _check_job_owner(state, job: str, principal: Principal) -> None:  # type: ignore[no-untyped-def]
    """An early refusal before any transaction. The rule that counts is checked again inside
    the request's transaction, on the locked job row (``jobs/service.py``): a job's owner is
    fixed once its row exists, but a new job's row is created by that very transaction."""
    with state.database.read_session() as session:
        owner = session.scalar(select(JobRow.owner).where(JobRow.name == job))
    ensure_may_act_on_job(principal, job, owner)
