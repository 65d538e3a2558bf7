"""The SQL of the catalog's namespaces (``catalog_namespaces``): one row each, named by its levels
joined by ``\x1f``, with its properties."""

from __future__ import annotations

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from metaservice.db.engine import dialect_insert
from metaservice.db.models import IcebergNamespaceRow, IcebergTableRow
from metaservice.names import NAMESPACE_SEPARATOR


def get_namespace(session: Session, name: str, *,
                  lock: bool = False) -> IcebergNamespaceRow | None:
    """The namespace's row; ``lock``: held until the transaction ends (on PostgreSQL), so that
    a child is never created under a parent being dropped."""
    return session.get(IcebergNamespaceRow, name, with_for_update=lock or None,
                       populate_existing=lock)


def list_namespaces(session: Session, parent: str | None = None, after: str | None = None,
                    limit: int | None = None) -> list[str]:
    """The stored names of ``parent``'s children (of the top level when None) in order, after
    ``after``, at most ``limit``."""
    name = IcebergNamespaceRow.name
    statement = select(name).order_by(name)
    if parent is None:
        statement = statement.where(~name.contains(NAMESPACE_SEPARATOR))
    else:
        under = parent + NAMESPACE_SEPARATOR
        statement = statement.where(func.substr(name, 1, len(under)) == under,
                                    ~func.substr(name, len(under) + 1)
                                    .contains(NAMESPACE_SEPARATOR))
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


def has_children(session: Session, name: str) -> bool:
    under = name + NAMESPACE_SEPARATOR
    return session.scalar(select(func.count()).select_from(IcebergNamespaceRow).where(
        func.substr(IcebergNamespaceRow.name, 1, len(under)) == under)) != 0


def count_tables(session: Session, namespace: str) -> int:
    return session.scalar(select(func.count()).select_from(IcebergTableRow)
                          .where(IcebergTableRow.namespace == namespace)) or 0
