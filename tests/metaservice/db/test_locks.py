"""The lock order is checked as locks are taken (``metaservice/db/locks.py``)."""

from __future__ import annotations

import pytest

from metaservice.barriers import repository as barriers_repo
from metaservice.db import locks
from metaservice.db.session import Database
from metaservice.jobs import repository as jobs_repo
from metaservice.names import TableName
from metaservice.tables import repository as tables_repo


def _tables(database: Database) -> list[int]:
    with database.transaction(write=True) as session:
        rows = tables_repo.ensure_tables(
            session, [TableName("c", "d", f"t{i}") for i in range(3)], 0)
        jobs_repo.create_planned_job(session, "a", 0, None)
        jobs_repo.create_planned_job(session, "b", 0, None)
        return sorted(r.id for r in rows.values())


def test_locks_in_the_order_are_taken(database: Database) -> None:
    ids = _tables(database)
    with database.transaction(write=True) as session:
        locks.change_topology(session)
        assert [j.name for j in locks.lock_jobs(session, ["b", "a"])] == ["a", "b"]
        assert sorted(locks.lock_tables(session, ids[1:])) == ids[1:]
        locks.lock_tables(session, [ids[1]])  # held already: taken again
        locks.share_tables(session, ids[1:])  # held FOR UPDATE: no upgrade
        locks.lock_topology(session)  # held already
        assert locks.holds_topology(session)
    with database.transaction(write=True) as session:
        assert not locks.holds_topology(session)  # released with the transaction
        locks.lock_tables(session, [ids[0]])


@pytest.mark.parametrize("out_of_order", [
    "topology after a job", "topology after a table", "a job after a table",
    "jobs by name", "tables by id", "tables by name after a table", "share then update"])
def test_a_lock_out_of_order_is_refused(database: Database, out_of_order: str) -> None:
    ids = _tables(database)
    with pytest.raises(locks.LockOrderError), database.transaction(write=True) as session:
        if out_of_order == "topology after a job":
            locks.lock_job(session, "a")
            locks.lock_topology(session)
        elif out_of_order == "topology after a table":
            locks.share_tables(session, ids[:1])
            locks.change_topology(session)
        elif out_of_order == "a job after a table":
            locks.lock_tables(session, ids[:1])
            locks.lock_job(session, "a")
        elif out_of_order == "jobs by name":
            locks.lock_job(session, "b")
            locks.lock_jobs(session, ["a"])
        elif out_of_order == "tables by id":
            locks.lock_tables(session, [ids[2]])
            tables_repo.lock_cut_states(session, ["c.d.t0"])
        elif out_of_order == "tables by name after a table":  # their ids are not known first
            locks.lock_tables(session, [ids[0]])
            barriers_repo.lock_tables_by_name(session, [TableName("c", "d", "t2")], "lake")
        else:
            locks.share_tables(session, ids[:1])
            locks.lock_table(session, ids[0])

