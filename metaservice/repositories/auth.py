"""All SQL about tokens, and the one read authorisation makes of a job (its owner)."""

from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from metaservice.db.engine import on_postgres
from metaservice.db.models import ApiTokenRow, JobRow

_TOKENS_LOCK = 0x4D5354  # "MST"


def lock_tokens(session: Session) -> None:
    """Serialise the changes to who is an admin (revocations, the bootstrap token at start)
    across server processes: on PostgreSQL a transaction-scoped advisory lock, taken before the
    transaction reads any token (its later statements see every change committed before it);
    SQLite's write lock serialises every writer already. No other lock is taken with it."""
    if on_postgres(session):
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _TOKENS_LOCK})


def token_named(session: Session, name: str) -> ApiTokenRow | None:
    return session.get(ApiTokenRow, name)


def token_with_hash(session: Session, digest: str) -> ApiTokenRow | None:
    return session.scalars(select(ApiTokenRow).where(ApiTokenRow.token_hash == digest)).first()


def add_token(session: Session, name: str, role: str, digest: str, created_at: int) -> None:
    session.add(ApiTokenRow(name=name, role=role, token_hash=digest, created_at=created_at))
    session.flush()


def active_admins(session: Session) -> list[str]:
    """The names of the admin tokens not revoked."""
    return list(session.scalars(select(ApiTokenRow.name).where(
        ApiTokenRow.role == "admin", ApiTokenRow.revoked_at.is_(None)).order_by(
        ApiTokenRow.name)))


def all_tokens(session: Session) -> list[ApiTokenRow]:
    return list(session.scalars(select(ApiTokenRow).order_by(ApiTokenRow.name)))


def job_owner(session: Session, job: str) -> str | None:
    """The token that registered ``job``; ``None`` for an unknown job or one registered with
    authentication off."""
    return session.scalar(select(JobRow.owner).where(JobRow.name == job))
