"""repositories/history.py and history/service.py against the barrier rows they read: ``snap(T, B)``
one at a time and many at once (with the expiration flag), each table's newest rows, the first
change after a barrier — the database's answers equal the rows' on both backends."""

from __future__ import annotations

import random

from metaservice.core.graph import JobEdges, Topology
from metaservice.db.models import BarrierRow, ExpirationRow, SnapshotExpirationRow, TableRow
from metaservice.db.session import Database
from metaservice.history.service import TAIL_DEPTH, DatabaseHistory
from metaservice.repositories import history as history_repo

Rows = dict[int, list[tuple[int, int, bool]]]  # table id -> (barrier, snapshot, rolled back)


def _random_history(database: Database, rng: random.Random,
                    tables: int = 5) -> tuple[dict[str, int], Rows, set[tuple[int, int]]]:
    """Tables with random barrier rows (some rolled back, snapshots repeated as heartbeats) and
    some snapshots approved for expiration."""
    with database.transaction(write=True) as session:
        table_rows = [TableRow(catalog="c", database="d", name=f"t{i}", created_at=0)
                      for i in range(tables)]
        session.add_all(table_rows)
        session.flush()
        ids = {f"c.d.t{i}": row.id for i, row in enumerate(table_rows)}
        rows: Rows = {}
        approved: set[tuple[int, int]] = set()
        for table_id in ids.values():
            barrier, snapshot = rng.randrange(1, 50), 1000
            rows[table_id] = []
            for _ in range(rng.randrange(0, 3 * TAIL_DEPTH)):
                barrier += rng.randrange(1, 20)
                if rng.random() < 0.7:
                    snapshot += 1
                rolled_back = rng.random() < 0.15
                rows[table_id].append((barrier, snapshot, rolled_back))
                session.add(BarrierRow(table_id=table_id, barrier=barrier, snapshot_id=snapshot,
                                       committed_at=barrier, rolled_back=rolled_back))
            snapshots = sorted({s for _, s, _ in rows[table_id]})
            chosen = [s for s in snapshots if rng.random() < 0.2]
            if chosen:
                expiration = f"exp-{table_id}"
                session.add(ExpirationRow(id=expiration, table_id=table_id, requested_at=0))
                session.flush()
                for s in chosen:
                    session.add(SnapshotExpirationRow(table_id=table_id, snapshot_id=s,
                                                      expiration_id=expiration, state="approved",
                                                      approved_at=0))
                    approved.add((table_id, s))
    return ids, rows, approved


def _snap(rows: Rows, table_id: int, barrier: int) -> tuple[int, int] | None:
    live = [(b, s) for b, s, rolled_back in rows[table_id] if not rolled_back and b <= barrier]
    return max(live) if live else None


def _first_change(rows: Rows, table_id: int, after: int, snapshot_id: int | None,
                  upto: int) -> int | None:
    return min((b for b, s, rolled_back in rows[table_id]
                if not rolled_back and after < b <= upto
                and (snapshot_id is None or s != snapshot_id)), default=None)


def _probes(rows: Rows, table_id: int, rng: random.Random) -> list[int]:
    barriers = [b for b, _, _ in rows[table_id]]
    return sorted({0, *barriers, *(b - 1 for b in barriers), *(b + 1 for b in barriers),
                   *(rng.randrange(0, 400) for _ in range(5))})


def test_snaps_tails_and_first_changes_are_the_rows(database: Database) -> None:
    for seed in range(4):
        rng = random.Random(seed)
        ids, rows, approved = _random_history(database, rng)
        with database.transaction(write=False) as session:
            for table_id in ids.values():
                tail = history_repo.tails(session, [table_id], TAIL_DEPTH)[table_id]
                live = sorted(((b, s) for b, s, rolled_back in rows[table_id]
                               if not rolled_back), reverse=True)
                assert tail == live[:TAIL_DEPTH]
                for barrier in _probes(rows, table_id, rng):
                    expected = _snap(rows, table_id, barrier)
                    assert history_repo.snap_seek(session, table_id, barrier) == expected
                    row = history_repo.snap(session, table_id, barrier)
                    assert (None if row is None else (row.barrier, row.snapshot_id)) == expected
                    for snapshot_id in (None, None if expected is None else expected[1]):
                        upto = barrier + rng.randrange(0, 200)
                        assert history_repo.first_change(
                            session, table_id, barrier, snapshot_id, upto,
                        ) == _first_change(rows, table_id, barrier, snapshot_id, upto)
            cuts = {t: rng.randrange(0, 400) for t in ids.values()}
            found = history_repo.snaps(session, cuts)
            for table_id, cut in cuts.items():
                expected = _snap(rows, table_id, cut)
                if expected is None:
                    assert table_id not in found
                    continue
                snap = found[table_id]
                assert (snap.barrier, snap.snapshot_id) == expected
                assert snap.approved_for_expiration == ((table_id, expected[1]) in approved)
        with database.transaction(write=True) as session:
            session.query(SnapshotExpirationRow).delete()
            session.query(ExpirationRow).delete()
            session.query(BarrierRow).delete()
            session.query(TableRow).delete()


def test_the_database_history_answers_as_the_rows(database: Database) -> None:
    """DatabaseHistory reads tails and seeks beyond them; its ``snap``, ``latest`` and
    ``first_change`` are the rows' whatever the depth of the question."""
    rng = random.Random(7)
    ids, rows, _ = _random_history(database, rng, tables=4)
    names = sorted(ids)
    with database.transaction(write=True) as session:
        for table_id in ids.values():
            live = [(b, s) for b, s, rolled_back in rows[table_id] if not rolled_back]
            row = session.get(TableRow, table_id)
            assert row is not None
            row.latest_barrier = max(live)[0] if live else None
    topology = Topology([JobEdges("j", frozenset(names[:2]), frozenset(names[2:]))])
    with database.transaction(write=False) as session:
        history = DatabaseHistory(session, topology)
        for name in names:
            table_id = ids[name]
            live = [b for b, _, rolled_back in rows[table_id] if not rolled_back]
            assert history.latest(name) == (max(live) if live else None)
            for barrier in _probes(rows, table_id, rng):
                completion = history.snap(name, barrier)
                found = None if completion is None else (completion.barrier, completion.snapshot_id)
                assert found == _snap(rows, table_id, barrier)
                upto = barrier + rng.randrange(0, 200)
                assert history.first_change(name, barrier, None, upto) == _first_change(
                    rows, table_id, barrier, None, upto)
