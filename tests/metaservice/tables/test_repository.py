"""repositories/tables.py against the rows it reads: get-or-create, look-ups and cut states."""

from __future__ import annotations

import random
import threading

from sqlalchemy import func, select, text

from metaservice.db.models import TableRow
from metaservice.db.session import Database
from metaservice.names import TableName
from metaservice.repositories import tables as tables_repo
from metaservice.repositories.tables import CutState


def _random_tables(database: Database, rng: random.Random, count: int) -> list[TableRow]:
    """``count`` tables whose names repeat across catalogs and databases, with random state."""
    names = {(rng.choice("ab"), rng.choice("xy"), f"t{rng.randrange(count)}")
             for _ in range(count * 2)}
    rows = []
    for catalog, db, name in sorted(names):
        latest = rng.choice([None, rng.randrange(1, 10**12)])
        catching_up = rng.random() < 0.3
        rows.append(TableRow(
            catalog=catalog, database=db, name=name, created_at=0, latest_barrier=latest,
            writer_job=rng.choice([None, f"job{rng.randrange(5)}"]), catching_up=catching_up,
            catch_up_floor=rng.randrange(1, 10**6) if catching_up else None))
    with database.transaction(write=True) as session:
        session.add_all(rows)
        session.execute(text("UPDATE topology_state SET version = 7 WHERE id = 1"))
    return rows


def test_ensure_tables_is_idempotent(database: Database) -> None:
    """A second ensure_tables returns the same rows, keeps their creation time, adds none."""
    names = [TableName("c", "d", "a"), TableName("c", "d", "b"), TableName("c", "d", "a")]
    with database.transaction(write=True) as session:
        first = {n: (r.id, r.created_at) for n, r in tables_repo.ensure_tables(
            session, names, 100).items()}
    with database.transaction(write=True) as session:
        second = tables_repo.ensure_tables(session, [*names, TableName("c", "d", "z")], 200)
        assert {n: (second[n].id, second[n].created_at) for n in first} == first
        assert second[TableName("c", "d", "z")].created_at == 200
        assert session.scalar(select(func.count()).select_from(TableRow)) == 3
    assert set(first) == {TableName("c", "d", "a"), TableName("c", "d", "b")}


def test_ensure_tables_racing_transactions_share_one_row(database: Database) -> None:
    """Two transactions creating the same table at once both get the one row, without error."""
    name = TableName("c", "d", "raced")
    seen: list[int] = []
    errors: list[BaseException] = []

    def second() -> None:
        try:
            with database.transaction(write=True) as session:
                seen.append(tables_repo.ensure_tables(session, [name], 2)[name].id)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    with database.transaction(write=True) as session:
        seen.append(tables_repo.ensure_tables(session, [name], 1)[name].id)
        thread = threading.Thread(target=second)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive()  # it waits for this transaction: the row is not committed
    thread.join(30)
    assert not thread.is_alive() and errors == []
    assert len(seen) == 2 and seen[0] == seen[1]
    with database.transaction(write=False) as session:
        assert session.scalar(select(func.count()).select_from(TableRow)) == 1


def test_cut_states_match_the_rows(database: Database) -> None:
    """cut_states returns each known name's row and the topology version, over random rows,
    duplicates, unknown names and more names than one SQLite statement takes."""
    rng = random.Random(11)
    rows = _random_tables(database, rng, 200)
    reference = {f"{r.catalog}.{r.database}.{r.name}": CutState(
        r.id, r.latest_barrier, r.catching_up, r.catch_up_floor) for r in rows}
    known = sorted(reference)
    with database.transaction(write=False) as session:
        assert tables_repo.cut_states(session, []) == ({}, None)
        assert tables_repo.cut_states(session, ["a.x.nope"]) == ({}, None)
        for size in (1, 3, 8, 9, 257, len(known)):
            wanted = rng.sample(known, min(size, len(known)))
            asked = wanted + rng.sample(wanted, len(wanted) // 3) + ["q.q.unknown"]
            rng.shuffle(asked)
            found, version = tables_repo.cut_states(session, asked)
            assert found == {n: reference[n] for n in wanted}
            assert version == 7


def test_lock_cut_states_agree_with_cut_states(database: Database) -> None:
    """The locking read returns the same states as the plain one."""
    rng = random.Random(12)
    rows = _random_tables(database, rng, 40)
    wanted = [f"{r.catalog}.{r.database}.{r.name}" for r in rng.sample(rows, 15)]
    with database.transaction(write=True) as session:
        assert tables_repo.lock_cut_states(session, [*wanted, "z.z.z"]) == \
            tables_repo.cut_states(session, wanted)[0]


def test_latest_and_writers_match_the_rows(database: Database) -> None:
    """latest_and_writers returns (latest, writer) of each known name, below and above the
    size where it filters by the bare table name, where the same name is in several catalogs."""
    rng = random.Random(13)
    rows = _random_tables(database, rng, 150)
    reference = {f"{r.catalog}.{r.database}.{r.name}": (r.latest_barrier, r.writer_job)
                 for r in rows}
    known = sorted(reference)
    with database.transaction(write=False) as session:
        for size in (0, 5, 64, 65, len(known)):
            wanted = set(rng.sample(known, size))
            absent = {f"zz.x.{n.rsplit('.', 1)[1]}" for n in wanted}  # same bare names
            assert tables_repo.latest_and_writers(session, wanted | absent) == {
                n: reference[n] for n in wanted}


def test_find_tables_match_the_rows(database: Database) -> None:
    """find_tables returns the rows of the known names, by OR of equalities and by tuple IN."""
    rng = random.Random(14)
    rows = _random_tables(database, rng, 60)
    by_name = {TableName(r.catalog, r.database, r.name): r.id for r in rows}
    for size in (1, 8, 9, 40):
        wanted = rng.sample(sorted(by_name), size)
        for for_update in (False, True):
            # one transaction each: locking several sets in one would break the lock order
            with database.transaction(write=True) as session:
                found = tables_repo.find_tables(
                    session, [*wanted, TableName("n", "o", "pe")], for_update=for_update)
                assert {n: r.id for n, r in found.items()} == {n: by_name[n] for n in wanted}
    with database.transaction(write=False) as session:
        assert tables_repo.tables_by_id(session, [by_name[wanted[0]], -1]).keys() == {
            by_name[wanted[0]]}
