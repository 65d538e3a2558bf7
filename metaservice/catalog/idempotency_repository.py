"""The SQL of the catalog's ``Idempotency-Key`` records (``idempotency.py``): a key claimed per
principal, bound to its request, and the outcome recorded with it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, delete, select, update
from sqlalchemy.orm import Session

from metaservice.db.engine import dialect_insert
from metaservice.db.models import IdempotencyKeyRow


def claim_key(session: Session, principal: str, key: str, operation: str, target: str,
              request_digest: str, now_ms: int, expires_at: int) -> bool:
    """Insert the key, bound to its request, unless it exists (race-safe: a racing insert waits
    for the first transaction on PostgreSQL, then finds the row); True when this request
    claimed it."""
    stmt = dialect_insert(session)(IdempotencyKeyRow).values(
        principal=principal, key=key, operation=operation, target=target,
        request_digest=request_digest, created_at=now_ms, expires_at=expires_at,
    ).on_conflict_do_nothing(index_elements=["principal", "key"]).returning(
        IdempotencyKeyRow.key)
    return session.execute(stmt).first() is not None


def finish_key(session: Session, principal: str, key: str, status: int,
               outcome: dict[str, object]) -> None:
    session.execute(update(IdempotencyKeyRow).where(
        IdempotencyKeyRow.principal == principal, IdempotencyKeyRow.key == key,
    ).values(status=status, outcome=outcome))


_KEY = select(IdempotencyKeyRow.operation, IdempotencyKeyRow.target,
              IdempotencyKeyRow.request_digest, IdempotencyKeyRow.status,
              IdempotencyKeyRow.outcome, IdempotencyKeyRow.expires_at)


def get_key(connection: Connection | Session, principal: str, key: str) -> Row[Any] | None:
    """The key's record (one statement on a session or a plain connection); None when none."""
    return connection.execute(_KEY.where(IdempotencyKeyRow.principal == principal,
                                         IdempotencyKeyRow.key == key)).first()


def delete_expired_keys(session: Session, principal: str, now_ms: int) -> None:
    session.execute(delete(IdempotencyKeyRow).where(
        IdempotencyKeyRow.principal == principal, IdempotencyKeyRow.expires_at <= now_ms))
