"""The lock order is checked as locks are taken (``metaservice/db/locks.py``)."""

from __future__ import annotations

import pytest

from metaservice.db import locks
from metaservice.db.session import Database
from metaservice.names import TableName
from metaservice.repositories import barriers as barriers_repo
from metaservice.repositories import jobs as jobs_repo
from metaservice.repositories import tables as tables_repo


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



def test_the_lean_locks_of_the_commit_path_are_twins_of_the_orm_locks(database: Database) -> None:
    """The commit path locks a table and a job with statements of its own that read only what
    its rules need (``repositories/barriers.py``: ``lock_table``, ``lock_job_state``), beside the
    ORM's locks (``db/locks.py``) that the rest of the server writes through. They stay two for
    speed; here they read the same values and take their place in one lock order."""
    ids = _tables(database)
    with database.transaction(write=True) as session:
        table = tables_repo.find_table(session, TableName("c", "d", "t1"))
        assert table is not None
        table.latest_barrier, table.latest_snapshot_id, table.writer_job = 7, 70, "a"
        job = jobs_repo.get_job(session, "a")
        assert job is not None
        job.state, job.run, job.pinned_barrier, job.last_committed_barrier = "running", 2, 9, 7
        job.pinned_snapshots, job.pin_invalidated_reason = {"c.d.t0": {"snapshot_id": 1}}, "r"
    lean_fields = ("latest_barrier", "latest_snapshot_id", "writer_job", "catching_up")
    job_fields = ("state", "run", "last_committed_barrier", "pinned_barrier", "pinned_after",
                  "pinned_snapshots", "pinned_previous", "pin_invalidated_reason")
    with database.transaction(write=True) as session:
        lean_job = barriers_repo.lock_job_state(session, "a")
        lean_table = barriers_repo.lock_table(session, ids[1], "c.d.t1")
    with database.transaction(write=True) as session:
        orm_job = locks.lock_job(session, "a")
        orm_table = locks.lock_table(session, ids[1])
    assert lean_job is not None and orm_job is not None
    assert lean_table is not None and orm_table is not None
    assert [getattr(lean_job, f) for f in job_fields] == [getattr(orm_job, f) for f in job_fields]
    assert [getattr(lean_table, f) for f in lean_fields] == [getattr(orm_table, f)
                                                           for f in lean_fields]
    assert (lean_table.id, lean_table.name) == (orm_table.id, orm_table.qualified_name)
    # One lock order: a lean lock is known to the ORM's and the other way round.
    for first, then in ((lambda s: barriers_repo.lock_table(s, ids[2], "c.d.t2"),
                         lambda s: locks.lock_table(s, ids[0])),
                        (lambda s: locks.lock_table(s, ids[2]),
                         lambda s: barriers_repo.lock_table(s, ids[0], "c.d.t0")),
                        (lambda s: barriers_repo.lock_table(s, ids[0], "c.d.t0"),
                         lambda s: locks.lock_job(s, "a")),
                        (lambda s: locks.lock_table(s, ids[0]),
                         lambda s: barriers_repo.lock_job_state(s, "a"))):
        with pytest.raises(locks.LockOrderError), database.transaction(write=True) as session:
            first(session)
            then(session)
