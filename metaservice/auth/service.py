"""Tokens and the rules of authorisation (docs/contract.md#tokens-and-roles).

Only a token's SHA-256 is stored. A request is allowed when its principal's role reaches the
route's (``auth/policy.py``), a writer acts only on jobs it registered, and the optional rate
limit lets it through. With ``METASERVICE_AUTH=disabled`` (allowed on loopback only) every
caller is an anonymous admin. The FastAPI dependency that applies these rules to each request is
``metaservice.auth.dependencies.authorize``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from metaservice import errors
from metaservice.auth.policy import Role
from metaservice.auth.tokens import hash_token, new_token
from metaservice.db.models import ApiTokenRow
from metaservice.repositories import auth as auth_repo

if TYPE_CHECKING:  # limits.py also holds an ASGI middleware: no web framework here
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
    if auth_repo.token_named(session, name) is not None:
        raise errors.TokenExistsError(f"a token named {name!r} exists; revoke it first",
                                      name=name)
    token = token or new_token()
    auth_repo.add_token(session, name, role.name, hash_token(token), now_ms)
    logger.info("token_created", extra={"token_name": name, "role": role.name})
    return CreatedToken(name, role, token, now_ms)


def list_tokens(session: Session) -> list[ApiTokenRow]:
    return auth_repo.all_tokens(session)


def revoke_token(session: Session, name: str, now_ms: int) -> ApiTokenRow:
    """Revoke the token (again: no change).

    Raises:
        UnknownTokenError: 404, no token of that name.
        LastAdminError: 409, it is the only active admin token: nobody could manage tokens
            after it (create another admin first). Two admins revoking each other at once
            never both succeed: revocations take turns (``auth_repo.lock_tokens``).
    """
    auth_repo.lock_tokens(session)
    row = auth_repo.token_named(session, name)
    if row is None:
        raise errors.UnknownTokenError(f"no token named {name!r}", name=name)
    session.refresh(row)  # as of the lock: another revocation may have committed meanwhile
    if row.revoked_at is None:
        if row.role == Role.admin.name and auth_repo.active_admins(session) == [name]:
            raise errors.LastAdminError(
                f"token {name!r} is the last active admin token; create another admin token "
                "(POST /admin/tokens) before revoking it", name=name)
        row.revoked_at = now_ms
        logger.info("token_revoked", extra={"token_name": name})
    return row


BOOTSTRAP_ADMIN = "bootstrap-admin"


def ensure_bootstrap_admin(session: Session, token: str, now_ms: int) -> str:
    """Make the configured bootstrap admin token (``METASERVICE_ADMIN_TOKEN``) valid, at each
    server start; answers what it did.

    - ``created``: no token had the secret: it is stored as the admin ``bootstrap-admin``
      (``rotated``: that token existed with another secret, which this one replaces).
    - ``active``: the token is valid already.
    - ``restored``: the token was revoked and no admin token is active: it is valid again, as
      an admin. This is the way back in when every admin was revoked (or lost): restart with
      ``METASERVICE_ADMIN_TOKEN`` set to the bootstrap secret.
    - ``revoked``: the token was revoked and another admin token is active: it stays revoked
      (an admin revoked it on purpose).
    """
    auth_repo.lock_tokens(session)
    digest = hash_token(token)
    row = auth_repo.token_with_hash(session, digest)
    if row is not None and row.revoked_at is None:
        return "active"
    if row is not None:
        if auth_repo.active_admins(session):
            logger.warning("bootstrap_admin_revoked", extra={"token_name": row.name})
            return "revoked"
        row.revoked_at, row.role = None, Role.admin.name
        logger.warning("bootstrap_admin_restored", extra={"token_name": row.name})
        return "restored"
    row = auth_repo.token_named(session, BOOTSTRAP_ADMIN)
    if row is not None:  # the secret was rotated: replace the old hash
        row.token_hash, row.revoked_at, row.role = digest, None, Role.admin.name
        logger.info("bootstrap_admin_rotated", extra={"token_name": BOOTSTRAP_ADMIN})
        return "rotated"
    auth_repo.add_token(session, BOOTSTRAP_ADMIN, Role.admin.name, digest, now_ms)
    logger.info("bootstrap_admin_created", extra={"token_name": BOOTSTRAP_ADMIN})
    return "created"


# -- the rules of each request ------------------------------------------------------------


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

    def lookup(self, session_factory: Callable[[], Session], token: str) -> Principal | None:
        """The principal of ``token`` (``None``: unknown or revoked), from memory or one query
        in a session of its own."""
        found, principal = self.cached(token)
        if found:
            return principal
        digest = hash_token(token)
        now = time.monotonic()
        with session_factory() as session:
            row = auth_repo.token_with_hash(session, digest)
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


def unauthenticated(message: str) -> errors.UnauthorizedError:
    """The answer to a request without a valid token: 401 with a bearer challenge."""
    error = errors.UnauthorizedError(message)
    error.headers = {"WWW-Authenticate": "Bearer"}
    return error


def ensure_role(principal: Principal, needed: Role) -> None:
    """A principal acts only where its role reaches the route's."""
    if not principal.may(needed):
        raise errors.ForbiddenError(
            f"this route needs the {needed.name} role; token {principal.name!r} is "
            f"{principal.role.name}", required=needed.name, role=principal.role.name)


def ensure_may_act_on_job(principal: Principal, job: str, owner: str | None) -> None:
    """A writer acts only on jobs it registered (docs/contract.md#tokens-and-roles); an admin (and
    every caller when authentication is off) on any job. A job registered with authentication off
    has no owner."""
    if principal.role == Role.writer and owner is not None and owner != principal.name:
        raise errors.ForbiddenError(f"job {job!r} was registered by another token", job=job)


def check_job_owner(session_factory: Callable[[], Session], job: str,
                    principal: Principal) -> None:
    """An early refusal before any transaction. The rule that counts is checked again inside
    the request's transaction, on the locked job row (``jobs/service.py``): a job's owner is
    fixed once its row exists, but a new job's row is created by that very transaction."""
    with session_factory() as session:
        owner = auth_repo.job_owner(session, job)
    ensure_may_act_on_job(principal, job, owner)


def ensure_within_rate(limiter: TokenBucket, key: str) -> None:
    """The optional rate limit, per token (or per client address without one)."""
    allowed, wait = limiter.allow(key)
    if not allowed:
        error = errors.RateLimitedError("rate limit exceeded; slow down",
                                        retry_after_seconds=round(wait, 3))
        error.headers = {"Retry-After": str(max(1, round(wait)))}
        raise error
