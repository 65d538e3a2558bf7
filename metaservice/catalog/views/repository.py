"""The SQL of the catalog's Iceberg views (``catalog_views``), and the lock that keeps a view
and a table from ever sharing a name.

A commit swaps a view's pointer by compare-and-swap on ``version``, as a table's
(``tables/repository.swap_pointer``). Whatever gives a view or a table a name (create, register,
rename, a commit that creates a table) first takes the name's lock, then checks that no object
of the other kind has it: on PostgreSQL a transaction-scoped advisory lock per name, so the
second of two racing transactions waits for the first and then sees its row; SQLite serialises
every writer already.
"""

from __future__ import annotations

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.orm import Session

from metaservice.catalog.errors import AlreadyExistsError
from metaservice.db.engine import dialect_insert, on_postgres
from metaservice.db.models import IcebergViewRow
from metaservice.names import dotted_namespace

_NAMES_LOCK = 0x4D534E  # "MSN"


def lock_name(session: Session, namespace: str, name: str) -> None:
    """Serialise the transactions that give ``namespace.name`` to a table or a view."""
    if on_postgres(session):
        session.execute(text("SELECT pg_advisory_xact_lock(:a, hashtext(:n))"),
                        {"a": _NAMES_LOCK, "n": f"{namespace}\x1f{name}"})


def refuse_view_name(session: Session, namespace: str, name: str,
                     renaming: str | None = None) -> None:
    """Before a table takes ``namespace.name`` (renamed from ``renaming``): take the name's lock
    and refuse a name a view has (409 ``AlreadyExistsException``, in the words of Iceberg's
    own catalogs)."""
    lock_name(session, namespace, name)
    if get_view(session, namespace, name) is not None:
        if renaming is not None:
            raise AlreadyExistsError(f"Cannot rename {renaming} to {dotted_namespace(namespace, name)}. View "
                                     "already exists (a table and a view never share a name)")
        raise AlreadyExistsError(f"View with same name already exists: {dotted_namespace(namespace, name)} (a "
                                 "table and a view never share a name)")


def get_view(session: Session, namespace: str, name: str) -> IcebergViewRow | None:
    return session.get(IcebergViewRow, (namespace, name), populate_existing=True)


def list_views(session: Session, namespace: str, after: str | None = None,
               limit: int | None = None) -> list[str]:
    """View names of a namespace in order, after ``after``, at most ``limit``."""
    statement = (select(IcebergViewRow.name).where(IcebergViewRow.namespace == namespace)
                 .order_by(IcebergViewRow.name))
    if after is not None:
        statement = statement.where(IcebergViewRow.name > after)
    return list(session.scalars(statement.limit(limit)))


def count_views(session: Session, namespace: str) -> int:
    return session.scalar(select(func.count()).select_from(IcebergViewRow)
                          .where(IcebergViewRow.namespace == namespace)) or 0


def view_with_uuid(session: Session, view_uuid: str) -> str | None:
    """``namespace.name`` of the view whose view-uuid this is, if the catalog has it."""
    row = session.execute(select(IcebergViewRow.namespace, IcebergViewRow.name).where(
        IcebergViewRow.view_uuid == view_uuid)).first()
    return None if row is None else f"{dotted_namespace(row[0], row[1])}"


def insert_view(session: Session, namespace: str, name: str, metadata_location: str,
                view_uuid: str, now_ms: int) -> bool:
    """Create the view's pointer at version 1; False when the name or the view-uuid is taken
    (race-safe)."""
    stmt = dialect_insert(session)(IcebergViewRow).values(
        namespace=namespace, name=name, metadata_location=metadata_location, version=1,
        view_uuid=view_uuid, created_at=now_ms, updated_at=now_ms,
    ).on_conflict_do_nothing().returning(IcebergViewRow.version)
    return session.execute(stmt).first() is not None


def swap_view(session: Session, namespace: str, name: str, *, expected_version: int,
              metadata_location: str, now_ms: int) -> bool:
    """Compare-and-swap: point at ``metadata_location`` if the version is still the one read."""
    result = session.execute(
        update(IcebergViewRow)
        .where(IcebergViewRow.namespace == namespace, IcebergViewRow.name == name,
               IcebergViewRow.version == expected_version)
        .values(metadata_location=metadata_location, version=expected_version + 1,
                updated_at=now_ms)
        .returning(IcebergViewRow.version))
    return result.first() is not None


def rename_view(session: Session, source: tuple[str, str], target: tuple[str, str],
                now_ms: int) -> bool:
    result = session.execute(
        update(IcebergViewRow)
        .where(IcebergViewRow.namespace == source[0], IcebergViewRow.name == source[1])
        .values(namespace=target[0], name=target[1], updated_at=now_ms)
        .returning(IcebergViewRow.version))
    return result.first() is not None


def delete_view(session: Session, namespace: str, name: str) -> bool:
    return session.execute(
        delete(IcebergViewRow)
        .where(IcebergViewRow.namespace == namespace, IcebergViewRow.name == name)
        .returning(IcebergViewRow.name)).first() is not None
