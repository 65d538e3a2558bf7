"""The lock order, in one place. Every path that locks rows of the protocol takes them here:

    the topology row  →  job rows (by name)  →  table rows (by id)

A transaction takes the locks it needs in that order and never an earlier one after a later
one: a path that finds it needs the topology lock once it holds a job or a table, or a table
with a smaller id than one it holds, must take it first (or do without it). Then two
transactions never wait for each other in a cycle, so PostgreSQL never has to break a deadlock
by failing one of them; they queue. The order is checked as the locks are taken, on both
backends: a lock out of order is a bug, logged (``lock_order_violation``) and, with
``METASERVICE_CHECK_LOCK_ORDER=1`` (the test suite sets it), raised as :class:`LockOrderError`.
A catalog transaction committing to several tables takes all of its locks up front, in this
order, before recording their barriers table by table (``catalog/tables/commits.py``).

Table rows are locked in two modes: ``FOR UPDATE`` (:func:`lock_tables`: commits, approvals,
topology changes, rollbacks) and ``FOR KEY SHARE`` (:func:`share_tables`: hand-outs and leases,
which must not overlap an approval of the same table). A table already locked ``FOR UPDATE`` may
be share-locked again; a share lock is never upgraded (two transactions upgrading would wait
for each other).

Rows no other path locks together with these (a rollback plan, a lease, a read session) may
be locked before the first table. Statements that write rows already locked here (``latest(T)``,
flags, the writer) or that insert rows pointing at them take no lock that waits.

On SQLite every write transaction holds the database write lock (``BEGIN IMMEDIATE``), which
orders everything; the functions read the same rows and the order is checked all the same.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from sqlalchemy import event, select, text, update
from sqlalchemy.orm import Session, SessionTransaction

from metaservice.db.driver import DriverStatement
from metaservice.db.engine import on_postgres
from metaservice.db.models import JobRow, TableRow, TopologyState

_HELD = "metaservice.locks"

logger = logging.getLogger(__name__)


class LockOrderError(RuntimeError):
    """A lock was asked for out of the lock order: a bug in the path that asked."""


@dataclass
class _Held:
    topology: bool = False
    jobs: set[str] = field(default_factory=set)
    tables: dict[int, bool] = field(default_factory=dict)  # id → exclusive (FOR UPDATE)


def _held(session: Session) -> _Held:
    held = session.info.get(_HELD)
    if held is None:
        held = session.info[_HELD] = _Held()
    return held


@event.listens_for(Session, "after_transaction_end")
def _forget(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:  # the outermost transaction ended: its locks are released
        session.info.pop(_HELD, None)


def _violation(held: _Held, message: str) -> None:
    if os.environ.get("METASERVICE_CHECK_LOCK_ORDER", "") not in ("", "0"):
        raise LockOrderError(message)
    logger.error("lock_order_violation", extra={"detail": message})



def holds_topology(session: Session) -> bool:
    return _held(session).topology


# -- the topology row -------------------------------------------------------------------------


def _check_topology(held: _Held) -> None:
    if not held.topology and (held.jobs or held.tables):
        _violation(
            held, f"the topology lock is taken after jobs {sorted(held.jobs)} / tables "
            f"{sorted(held.tables)}: the lock order is topology → jobs → tables")


def lock_topology(session: Session) -> None:
    """The topology row, locked: the set of running jobs cannot change until the transaction
    ends (a commit that recomputes catching-up flags, which depend on the topology)."""
    held = _held(session)
    _check_topology(held)
    session.execute(select(TopologyState.id).where(TopologyState.id == 1).with_for_update())
    held.topology = True


def change_topology(session: Session) -> int:
    """Lock the topology row and bump its version: every change to the set of running jobs
    goes through here, so changes made by several server processes are serialised and topology
    caches see them. Returns the new version."""
    held = _held(session)
    _check_topology(held)
    session.execute(update(TopologyState).where(TopologyState.id == 1)
                    .values(version=TopologyState.version + 1))
    held.topology = True
    return session.scalar(select(TopologyState.version).where(TopologyState.id == 1)) or 0


# -- job rows ---------------------------------------------------------------------------------


def _new_jobs(held: _Held, names: Iterable[str]) -> list[str]:
    new = sorted(set(names) - held.jobs)
    if new and held.tables:
        _violation(held, f"jobs {new} are locked after tables {sorted(held.tables)}: "
                             "the lock order is topology → jobs → tables")
    if new and held.jobs and new[0] < max(held.jobs):
        _violation(held, f"job {new[0]!r} is locked after job {max(held.jobs)!r}: jobs are "
                             "locked by name")
    return new


def lock_job(session: Session, name: str) -> JobRow | None:
    """The job's row, locked and re-read; None when there is no such job."""
    held = _held(session)
    _new_jobs(held, [name])
    row = session.scalars(select(JobRow).where(JobRow.name == name).with_for_update()
                          .execution_options(populate_existing=True)).first()
    if row is not None:
        held.jobs.add(name)
    return row


def check_job(session: Session, name: str) -> None:
    """Report a violation unless locking job ``name`` now keeps the order (for a repository
    statement that locks and reads at once)."""
    _new_jobs(_held(session), [name])


def note_job_locked(session: Session, name: str) -> None:
    """Record a job row a repository's own statement has just locked; :func:`check_job`
    first."""
    _held(session).jobs.add(name)


def lock_jobs(session: Session, names: Iterable[str], *,
              running_only: bool = False) -> list[JobRow]:
    """The rows of the named jobs (only the running ones with ``running_only``), locked by
    name and re-read."""
    wanted = sorted(set(names))
    held = _held(session)
    _new_jobs(held, wanted)
    if not wanted:
        return []
    stmt = select(JobRow).where(JobRow.name.in_(wanted))
    if running_only:
        stmt = stmt.where(JobRow.state == "running")
    rows = list(session.scalars(stmt.order_by(JobRow.name).with_for_update()
                                .execution_options(populate_existing=True)))
    held.jobs.update(r.name for r in rows)
    return rows


# -- table rows -------------------------------------------------------------------------------


def _new_tables(held: _Held, ids: Iterable[int], *, exclusive: bool) -> list[int]:
    wanted = sorted(set(ids))
    upgraded = [i for i in wanted if i in held.tables and exclusive and not held.tables[i]]
    if upgraded:
        _violation(held, f"tables {upgraded} are share-locked and then locked FOR UPDATE")
    new = [i for i in wanted if i not in held.tables]
    if new and held.tables and new[0] < max(held.tables):
        _violation(held, f"table {new[0]} is locked after table {max(held.tables)}: tables "
                             "are locked by id")
    return new


def lock_tables(session: Session, ids: Iterable[int]) -> dict[int, TableRow]:
    """The table rows, locked ``FOR UPDATE`` in id order and re-read, by id."""
    held = _held(session)
    wanted = sorted(set(ids))
    _new_tables(held, wanted, exclusive=True)
    if not wanted:
        return {}
    rows = session.scalars(select(TableRow).where(TableRow.id.in_(wanted))
                           .order_by(TableRow.id).with_for_update()
                           .execution_options(populate_existing=True)).all()
    for r in rows:
        held.tables[r.id] = True
    return {r.id: r for r in rows}


def lock_table(session: Session, table_id: int) -> TableRow | None:
    return lock_tables(session, [table_id]).get(table_id)


class _SharedRow(NamedTuple):
    id: int


# Constant text (the ids travel as one array): prepared once by the driver, and no statement
# built per call on the hand-out path.
_SHARE_TABLES = DriverStatement(text(
    "SELECT id FROM tables WHERE id = ANY(CAST(:ids AS integer[])) ORDER BY id FOR KEY SHARE"),
    _SharedRow)


def share_tables(session: Session, ids: Iterable[int]) -> None:
    """Share-lock the table rows (``FOR KEY SHARE``, by id): an approval of one of these tables
    (``FOR UPDATE``) waits for this transaction, and this one for an approval in progress;
    share locks do not wait for each other."""
    held = _held(session)
    new = _new_tables(held, ids, exclusive=False)
    if not new:
        return
    if on_postgres(session):
        _SHARE_TABLES.rows(session, {"ids": new})
    for i in new:
        held.tables[i] = False


def note_table_locked(session: Session, table_id: int) -> None:
    """Record a table row a repository's own statement has just locked ``FOR UPDATE`` (the
    commit's lock-and-read in one statement); :func:`check_table` first."""
    _held(session).tables[table_id] = True


def check_table(session: Session, table_id: int) -> None:
    """Report a violation unless locking ``table_id`` ``FOR UPDATE`` now keeps the order (for
    a repository statement that locks and reads at once)."""
    check_tables(session, [table_id])


def check_first_tables(session: Session) -> None:
    """Report a violation unless no table row is locked yet: a statement that finds its
    tables by name and locks them in id order keeps the order only as the first."""
    held = _held(session)
    if held.tables:
        _violation(held, f"tables are locked by name after tables {sorted(held.tables)}: "
                         "their ids, unknown before, may be smaller")


def check_tables(session: Session, ids: Iterable[int]) -> None:
    """:func:`check_table` for a statement that locks several table rows, in id order."""
    _new_tables(_held(session), ids, exclusive=True)
