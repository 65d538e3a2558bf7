"""``Idempotency-Key`` on the catalog's mutations (the Iceberg REST specification): a retry of a
request whose answer was lost gets the first answer instead of running again.

A mutation sent with a key claims it (per principal) in its own write transaction, and records
its outcome there: the key and the change commit together, so a crash can never leave a change
whose key a retry would not find. A final refusal (a 4xx other than a lost race, 401 and 429)
reached in that transaction is recorded in it, its change rolled back to a savepoint
(``Guard.keep_refusal``); one reached before it, in a transaction of its own. A 5xx or a lost
compare-and-swap is not final and is not recorded. A request carrying a finished key is
answered from the outcome without running (a commit looks at its key in the read phase that
reads its tables: ``Guard.look``); one racing the first waits on the key's row (PostgreSQL) or
the database lock (SQLite) and is then answered the same way.

A key is bound to the request that claimed it
(docs/contract.md#object-storage-and-the-rest-of-the-specification): its operation, the path it was
sent to (the table or namespace) and a digest of its path, query and body (:func:`request_digest`).
Its outcome is replayed only to the same request; any other use of the key is refused (422), and
that refusal changes nothing (a request that loses the claim to another has its own transaction
rolled back). Keys recorded before the binding existed (migration 0014) are bound by operation only,
until they expire. Keys live ``METASERVICE_IDEMPOTENCY_KEY_SECONDS``, advertised in ``/v1/config``
as ``idempotency-key-lifetime``; a principal's expired keys are deleted when it claims a new one.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from metaservice.catalog import idempotency_repository as repo
from metaservice.catalog.errors import BadRequestError

_UUID = re.compile(r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$")

# Statuses of a refusal that is final: the same request would be refused again.
FINAL_ERROR_STATUSES = frozenset({400, 403, 404, 405, 406, 409, 410, 413, 415, 422})


class Replay(Exception):
    """The key was claimed by an earlier request: answer from its outcome (``stored``, when the
    request has read it already)."""

    def __init__(self, stored: Stored | None = None) -> None:
        super().__init__()
        self.stored = stored


def request_digest(method: str, path: str, query: Iterable[tuple[str, str]],
                   body: Any | None) -> str:
    """SHA-256 of the request a key is bound to: its method, path, query parameters (sorted)
    and body (its JSON document, keys sorted), so that the same request sent again matches
    however its client orders its keys."""
    document = {"method": method, "path": path, "query": sorted(query), "body": body}
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=True,
                           default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def lifetime(seconds: float) -> str:
    """The ISO-8601 duration ``/v1/config`` advertises."""
    return f"PT{int(seconds)}S"


@dataclass
class Guard:
    """One request's key: what it claims, and the outcome it leaves for a retry."""

    principal: str
    key: str
    operation: str
    target: str  # the path the request was sent to
    digest: str  # request_digest() of the request
    now_ms: int
    lifetime_ms: int
    status: int  # the answer's status when the mutation succeeds
    # A refusal's status and body when it is final (the same request would be refused again),
    # else None: the route's error renderer, which the services beneath it cannot import.
    final_refusal: Callable[[Exception], tuple[int, dict[str, Any]] | None] = (
        lambda exc: None)
    claimed: bool = False
    recorded: bool = False  # the outcome is written in the mutation's transaction
    outcome: dict[str, Any] = field(default_factory=dict)

    def look(self, connection: Connection | Session) -> None:
        """Look at the key in the mutation's read phase.

        Raises:
            Replay: the key has an outcome (carried, so that it is not read again).
        """
        found = stored(connection, self)
        if found is not None:
            raise Replay(found)

    def claim(self, session: Session) -> None:
        """Claim the key in the mutation's write transaction.

        Raises:
            Replay: an earlier request claimed it.
        """
        repo.delete_expired_keys(session, self.principal, self.now_ms)
        if not repo.claim_key(session, self.principal, self.key, self.operation, self.target,
                              self.digest, self.now_ms, self.now_ms + self.lifetime_ms):
            raise Replay
        self.claimed = True

    def finish(self, session: Session, outcome: dict[str, Any]) -> None:
        """Record the outcome in the same transaction (after ``claim``)."""
        self.outcome = outcome
        repo.finish_key(session, self.principal, self.key, self.status, outcome)

    def keep_refusal(self, session: Session, exc: Exception) -> bool:
        """Record ``exc`` as the key's outcome in the mutation's transaction (after ``claim``,
        its change rolled back to a savepoint) when it is a final refusal; whether it was."""
        refusal = self.final_refusal(exc) if self.claimed else None
        if refusal is None:
            return False
        status, body = refusal
        repo.finish_key(session, self.principal, self.key, status, {"error": body})
        self.recorded = True
        return True


def guard(key: str, principal: str | None, operation: str, *, target: str, digest: str,
          now_ms: int, lifetime_seconds: float, status: int,
          final_refusal: Callable[[Exception], tuple[int, dict[str, Any]] | None]) -> Guard:
    """The guard of a request sent with the key ``key``.

    Raises:
        BadRequestError: a key that is not a UUID.
    """
    if not _UUID.match(key):
        raise BadRequestError("Idempotency-Key must be a UUID (36 characters, UUIDv7 advised)")
    return Guard(principal or "", key.lower(), operation, target[:TARGET_LENGTH], digest,
                 now_ms, int(lifetime_seconds * 1000), status, final_refusal)


TARGET_LENGTH = 1024  # the stored path is for messages only: the digest covers all of it


@dataclass(frozen=True)
class Stored:
    operation: str
    target: str | None  # None: recorded before keys were bound to their request
    digest: str | None
    status: int
    outcome: dict[str, Any]

    def answers(self, one: Guard) -> bool:
        """Whether this outcome is the answer to ``one``'s request (the same operation, path,
        query and body); a key recorded before the binding, to the same operation."""
        if self.operation != one.operation:
            return False
        return self.digest is None or self.digest == one.digest


def stored(connection: Connection | Session, one: Guard) -> Stored | None:
    """The finished outcome of the key, if it has one and has not expired."""
    row = repo.get_key(connection, one.principal, one.key)
    if row is None or row.expires_at <= one.now_ms or row.status is None:
        return None
    return Stored(row.operation, row.target, row.request_digest, row.status,
                  dict(row.outcome or {}))


def record(session: Session, one: Guard, status: int, outcome: dict[str, Any]) -> None:
    """Record an outcome reached outside a claiming transaction (a final refusal, or a
    mutation that changed nothing), unless the key has one already."""
    repo.delete_expired_keys(session, one.principal, one.now_ms)
    if repo.claim_key(session, one.principal, one.key, one.operation, one.target, one.digest,
                      one.now_ms, one.now_ms + one.lifetime_ms):
        repo.finish_key(session, one.principal, one.key, status, outcome)
