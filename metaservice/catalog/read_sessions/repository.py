"""The SQL of the read sessions of the catalog's consistent warehouses
(docs/contract.md#read-sessions): a session (a lease), the cut it fixed for each table, and the
one statement of a repeat load of a table in a session."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, and_, bindparam, func, select, text
from sqlalchemy.orm import Session

from metaservice.db.engine import on_postgres
from metaservice.db.models import (
    IcebergTableRow,
    LeaseRow,
    ReadSessionCutRow,
    ReadSessionRow,
    TableRow,
)
from metaservice.names import TableName, qualified


def count_live_read_sessions(session: Session, principal: str | None, now_ms: int) -> int:
    return session.scalar(
        select(func.count()).select_from(ReadSessionRow)
        .join(LeaseRow, LeaseRow.id == ReadSessionRow.id)
        .where(LeaseRow.principal.is_(None) if principal is None
               else LeaseRow.principal == principal,
               LeaseRow.expires_at > now_ms)) or 0


def lock_read_sessions_of(session: Session, principal: str | None) -> None:
    """Serialise the opening of one principal's read sessions (their count is capped)."""
    if on_postgres(session):
        session.execute(text("SELECT pg_advisory_xact_lock(:a, hashtext(:p))"),
                        {"a": _READ_SESSIONS_LOCK, "p": principal or ""})


_READ_SESSIONS_LOCK = 0x4D5352  # "MSR"


def insert_read_session(session: Session, session_id: str, kind: str, barrier: int | None,
                        now_ms: int) -> None:
    session.add(ReadSessionRow(id=session_id, kind=kind, barrier=barrier, created_at=now_ms))
    session.flush()


def get_read_session(session: Session, session_id: str, *,
                     lock: bool) -> tuple[ReadSessionRow, LeaseRow] | None:
    """The read session and its lease; ``lock``: locked, so that a session's loads that fix a
    cut are serialised and two tables of one pipeline loaded at once still get one cut."""
    statement = (select(ReadSessionRow, LeaseRow)
                 .join(LeaseRow, LeaseRow.id == ReadSessionRow.id)
                 .where(ReadSessionRow.id == session_id))
    if lock:
        statement = statement.with_for_update().execution_options(populate_existing=True)
    row = session.execute(statement).first()
    return None if row is None else (row[0], row[1])


_tables, _cuts = TableRow.__table__.c, ReadSessionCutRow.__table__.c
_sessions, _leases = ReadSessionRow.__table__.c, LeaseRow.__table__.c
_pointers = IcebergTableRow.__table__.c

# A repeat load of a table in a read session, in one statement: the session's lease (its
# owner and term), the table's cut in the session if fixed, and the table's pointer; every
# join is by a key.
_FIXED_CUT = (
    select(_leases.principal, _leases.expires_at, _leases.ttl_ms, _sessions.view,
           _cuts.barrier, _cuts.snapshot_id, _pointers.metadata_location)
    .select_from(ReadSessionRow.__table__)
    .join(LeaseRow.__table__, _leases.id == _sessions.id)
    .outerjoin(TableRow.__table__, and_(_tables.catalog == bindparam("catalog"),
                                        _tables.database == bindparam("database"),
                                        _tables.name == bindparam("table")))
    .outerjoin(ReadSessionCutRow.__table__, and_(_cuts.session_id == _sessions.id,
                                                 _cuts.table_id == _tables.id))
    .outerjoin(IcebergTableRow.__table__, and_(_pointers.namespace == bindparam("namespace"),
                                               _pointers.name == bindparam("pointer")))
    .where(_sessions.id == bindparam("session_id")))


@dataclass(frozen=True)
class FixedCut:
    """What a repeat load of a table in a read session reads: the session's lease (owner,
    expiry, term) and kind, the table's cut if the session fixed one, and the table's current
    metadata file (None: no such table)."""

    principal: str | None
    expires_at: int
    ttl_ms: int
    kind: str
    barrier: int | None
    snapshot_id: int | None
    head_location: str | None


def fixed_cut(session: Session | Connection, session_id: str,
              name: TableName) -> FixedCut | None:
    """The read session ``session_id`` and the cut it fixed for ``name`` (read without a
    lock); None when there is no such session."""
    row = session.execute(_FIXED_CUT, {
        "session_id": session_id, "catalog": name.catalog, "database": name.database,
        "table": name.table, "namespace": name.database, "pointer": name.table}).first()
    return None if row is None else FixedCut(*row)


_READ_SESSION_CUTS = (
    select(_tables.catalog, _tables.database, _tables.name, _cuts.table_id, _cuts.barrier,
           _cuts.snapshot_id)
    .join_from(ReadSessionCutRow.__table__, TableRow.__table__, _tables.id == _cuts.table_id)
    .where(_cuts.session_id == bindparam("session_id")))


def read_session_cuts(session: Session, session_id: str) -> dict[str, tuple[int, int, int]]:
    """``{table name: (table_id, barrier, snapshot_id)}`` of the tables the session fixed."""
    rows = session.execute(_READ_SESSION_CUTS, {"session_id": session_id})
    return {qualified(c, d, t): (table_id, barrier, snapshot_id)
            for c, d, t, table_id, barrier, snapshot_id in rows}


def add_read_session_cut(session: Session, session_id: str, table_id: int, barrier: int,
                         snapshot_id: int) -> None:
    session.add(ReadSessionCutRow(session_id=session_id, table_id=table_id, barrier=barrier,
                                  snapshot_id=snapshot_id))
    session.flush()
