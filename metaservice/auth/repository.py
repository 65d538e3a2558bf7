"""All SQL about tokens, and the one read authorisation makes of a job (its owner)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from metaservice.db.models import ApiTokenRow, JobRow


def token_named(session: Session, name: str) -> ApiTokenRow | None:
    return session.get(ApiTokenRow, name)


def token_with_hash(session: Session, digest: str) -> ApiTokenRow | None:
    return session.scalars(select(ApiTokenRow).where(ApiTokenRow.token_hash == digest)).first()


def add_token(session: Session, name: str, role: str, digest: str, created_at: int) -> None:
    session.add(ApiTokenRow(name=name, role=role, token_hash=digest, created_at=created_at))
    session.flush()


def all_tokens(session: Session) -> list[ApiTokenRow]:
    return list(session.scalars(select(ApiTokenRow).order_by(ApiTokenRow.name)))


def job_owner(session: Session, job: str) -> str | None:
    """The token that registered ``job``; ``None`` for an unknown job or one registered with
    authentication off."""
    return session.scalar(select(JobRow.owner).where(JobRow.name == job))
