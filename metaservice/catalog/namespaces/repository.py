"""The SQL of the catalog's namespaces (``catalog_namespaces``): one row each, with its
properties."""

from __future__ import annotations

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from metaservice.db.engine import dialect_insert
from metaservice.db.models import IcebergNamespaceRow, IcebergTableRow


def get_namespace(session: Session, name: str) -> IcebergNamespaceRow | None:
    return session.get(IcebergNamespaceRow, name)


def list_namespaces(session: Session, after: str | None = None,
                    limit: int | None = None) -> list[str]:
    """Namespace names in order, after ``after``, at most ``limit``."""
    statement = select(IcebergNamespaceRow.name).order_by(IcebergNamespaceRow.name)
    if after is not None:
        statement = statement.where(IcebergNamespaceRow.name > after)
    return list(session.scalars(statement.limit(limit)))


def create_namespace(session: Session, name: str, properties: dict[str, str],
                     now_ms: int) -> bool:
    """Insert the namespace; False when it exists (race-safe)."""
    stmt = dialect_insert(session)(IcebergNamespaceRow).values(
        name=name, properties=properties, created_at=now_ms,
    ).on_conflict_do_nothing(index_elements=["name"]).returning(IcebergNamespaceRow.name)
    return session.execute(stmt).first() is not None


def set_namespace_properties(session: Session, name: str, properties: dict[str, str]) -> None:
    session.execute(update(IcebergNamespaceRow).where(IcebergNamespaceRow.name == name)
                    .values(properties=properties))


def drop_namespace(session: Session, name: str) -> bool:
    return session.execute(delete(IcebergNamespaceRow).where(IcebergNamespaceRow.name == name)
                           .returning(IcebergNamespaceRow.name)).first() is not None


def count_tables(session: Session, namespace: str) -> int:
    return session.scalar(select(func.count()).select_from(IcebergTableRow)
                          .where(IcebergTableRow.namespace == namespace)) or 0
