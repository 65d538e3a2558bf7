"""retention/leases/service.py called directly: what can be leased, terms on the manual clock,
renewal, ``hold_more``, visibility by principal, and the protection a live lease gives."""

from __future__ import annotations

import pytest

from metaservice import errors
from metaservice.auth.policy import Role
from metaservice.auth.service import ANONYMOUS_ADMIN, Principal
from metaservice.clock import ManualClock
from metaservice.context import ServiceContext
from metaservice.db.models import BarrierRow, ExpirationRow, SnapshotExpirationRow, TableRow
from metaservice.db.session import Database
from metaservice.names import TableName
from metaservice.repositories import leases as leases_repo
from metaservice.retention.leases import service as leases
from metaservice.retention.protection import protected_snapshots
from metaservice.settings import Settings

T = TableName("lake", "db", "t")
ALICE = Principal("alice", Role.writer)
BOB = Principal("bob", Role.writer)


@pytest.fixture
def ctx(settings: Settings, clock: ManualClock) -> ServiceContext:
    return ServiceContext(settings, clock)


@pytest.fixture
def table_id(database: Database) -> int:
    """Table T: barriers 10, 20, 30 completed by snapshots 1, 2, 3; barrier 40 (snapshot 4)
    rolled back; snapshot 5 recorded and approved for expiration."""
    with database.transaction(write=True) as session:
        row = TableRow(catalog=T.catalog, database=T.database, name=T.table, created_at=0,
                       latest_barrier=30, latest_snapshot_id=3, latest_committed_at=30)
        session.add(row)
        session.flush()
        for i in (1, 2, 3, 4, 5):
            session.add(BarrierRow(table_id=row.id, barrier=10 * i if i < 5 else 5,
                                   snapshot_id=i, committed_at=10 * i, rolled_back=i == 4))
        session.add(ExpirationRow(id="e1", table_id=row.id, requested_at=0))
        session.flush()
        session.add(SnapshotExpirationRow(table_id=row.id, snapshot_id=5, expiration_id="e1",
                                          state="approved", approved_at=0))
        return row.id


def test_only_recorded_unexpired_snapshots_can_be_leased(
        database: Database, ctx: ServiceContext, clock: ManualClock, table_id: int) -> None:
    """A lease holds recorded snapshots, deduplicated, for ceil(ttl) ms from now; rolled-back,
    unknown and approved snapshots and unknown tables are refused."""
    with database.transaction(write=True) as session:
        lease = leases.create_lease(session, ctx, "q", 1.0005, [(T, 2), (T, 1), (T, 2)])
    assert lease.snapshots == (leases.LeasedSnapshot(str(T), 1), leases.LeasedSnapshot(str(T), 2))
    assert (lease.created_at, lease.expires_at) == (clock.now_ms(), clock.now_ms() + 1001)
    for snapshots, error in (([(T, 4)], errors.UnknownSnapshotError),
                             ([(T, 1), (T, 99)], errors.UnknownSnapshotError),
                             ([(T, 1), (T, 5)], errors.SnapshotExpiredError),
                             ([(TableName("lake", "db", "nope"), 1)], errors.UnknownTableError)):
        with pytest.raises(error), database.transaction(write=True) as session:
            leases.create_lease(session, ctx, "q", 60, snapshots)
    with database.transaction(write=False) as session:
        assert [r.id for r in leases_repo.live_leases(session, clock.now_ms())] == [
            lease.lease_id]


def test_renewal_runs_the_term_again_until_the_lease_expires(
        database: Database, ctx: ServiceContext, clock: ManualClock, table_id: int) -> None:
    """Renewal without a TTL grants the original term from now, with one the new term; at its
    expiry instant a lease is expired and cannot be renewed."""
    with database.transaction(write=True) as session:
        lease_id = leases.create_lease(session, ctx, "q", 10, [(T, 1)]).lease_id
    clock.advance(9_000)
    with database.transaction(write=True) as session:
        assert leases.renew_lease(session, ctx, lease_id, None).expires_at == \
            clock.now_ms() + 10_000
    with database.transaction(write=True) as session:
        assert leases.renew_lease(session, ctx, lease_id, 2).expires_at == clock.now_ms() + 2_000
    clock.advance(2_000)
    with pytest.raises(errors.LeaseExpiredError), database.transaction(write=True) as session:
        leases.renew_lease(session, ctx, lease_id, None)


def test_hold_more_adds_snapshots_and_keeps_the_lease_alive(
        database: Database, ctx: ServiceContext, clock: ManualClock, table_id: int) -> None:
    """hold_more adds only new snapshots and runs the original term again; an approved
    snapshot is refused (410)."""
    with database.transaction(write=True) as session:
        lease_id = leases.create_lease(session, ctx, "q", 10, [(T, 1)]).lease_id
    clock.advance(5_000)
    with database.transaction(write=True) as session:
        row = leases_repo.get_lease(session, lease_id, for_update=True)
        assert row is not None
        leases.hold_more(session, ctx, row, [(str(T), table_id, 1), (str(T), table_id, 3)])
    with database.transaction(write=True) as session:
        lease = leases.get_lease(session, lease_id)
        assert [s.snapshot_id for s in lease.snapshots] == [1, 3]
        assert lease.expires_at == clock.now_ms() + 10_000
        row = leases_repo.get_lease(session, lease_id, for_update=True)
        assert row is not None
        with pytest.raises(errors.SnapshotExpiredError):
            leases.hold_more(session, ctx, row, [(str(T), table_id, 5)])
    clock.advance(1_000)
    with database.transaction(write=True) as session:
        row = leases_repo.get_lease(session, lease_id, for_update=True)
        assert row is not None
        leases.keep_alive(ctx, row)
    with database.transaction(write=False) as session:
        assert leases.get_lease(session, lease_id).expires_at == clock.now_ms() + 10_000


def test_a_lease_is_visible_to_its_principal_and_admins_only(
        database: Database, ctx: ServiceContext, table_id: int) -> None:
    """Another principal's lease does not exist for a caller: not found, not listed, hidden;
    a lease taken anonymously is seen by admins only."""
    with database.transaction(write=True) as session:
        mine = leases.create_lease(session, ctx, "q", 60, [(T, 1)], ALICE).lease_id
        anonymous = leases.create_lease(session, ctx, "q", 60, [(T, 2)]).lease_id
    with database.transaction(write=True) as session:
        rows = {}
        for i in (mine, anonymous):
            row = leases_repo.get_lease(session, i)
            assert row is not None
            rows[i] = row
        assert [leases.visible_to(rows[mine], p) for p in (ALICE, BOB, ANONYMOUS_ADMIN)] == [
            True, False, True]
        assert [leases.visible_to(rows[anonymous], p)
                for p in (ALICE, Principal(None, Role.writer), ANONYMOUS_ADMIN)] == [
            False, False, True]
        for call in (lambda: leases.get_lease(session, mine, BOB),
                     lambda: leases.renew_lease(session, ctx, mine, None, BOB),
                     lambda: leases.release_lease(session, mine, BOB)):
            with pytest.raises(errors.UnknownLeaseError):
                call()
        listed = {p.name: [x.lease_id for x in leases.list_leases(
            session, ctx, table=T, holder=None, limit=10, principal=p)]
            for p in (ALICE, BOB, ANONYMOUS_ADMIN)}
        # Same term: soonest to expire first, then by id.
        assert listed == {"alice": [mine], "bob": [], None: sorted([mine, anonymous])}
        assert leases.hidden_leases(session, [mine, anonymous], ALICE) == {anonymous}
        assert leases.hidden_leases(session, [mine, anonymous], ANONYMOUS_ADMIN) == set()
        leases.release_lease(session, mine, ALICE)
        with pytest.raises(errors.UnknownLeaseError):
            leases.get_lease(session, mine, ALICE)


def test_a_live_lease_protects_its_snapshots_and_an_expired_one_does_not(
        database: Database, ctx: ServiceContext, clock: ManualClock, table_id: int) -> None:
    """Snapshot 1 is protected as ``lease:<id>`` while the lease lives, and not from its expiry."""
    with database.transaction(write=True) as session:
        lease_id = leases.create_lease(session, ctx, "q", 10, [(T, 1)]).lease_id

    def reasons() -> dict[int, list[str]]:
        with database.transaction(write=False) as session:
            table = session.get(TableRow, table_id)
            assert table is not None
            return {s: p.reasons for s, p in protected_snapshots(
                session, ctx, table, clock.now_ms()).items()}

    assert f"lease:{lease_id}" in reasons()[1]
    clock.advance(10_000)
    assert 1 not in reasons()
    assert "latest" in reasons()[3]


def test_an_expired_lease_is_forgotten_an_hour_after_its_expiry(
        database: Database, ctx: ServiceContext, clock: ManualClock, table_id: int) -> None:
    """An expired lease is still known (renewal: 410) until a grant an hour after its expiry
    purges it (then: unknown)."""
    with database.transaction(write=True) as session:
        old = leases.create_lease(session, ctx, "q", 1, [(T, 1)]).lease_id
    clock.advance(1_000 + leases.FORGET_EXPIRED_AFTER_MS)
    with database.transaction(write=True) as session:
        leases.create_lease(session, ctx, "q", 1, [(T, 2)])
        assert leases.get_lease(session, old).lease_id == old  # expired exactly an hour ago
        with pytest.raises(errors.LeaseExpiredError):
            leases.renew_lease(session, ctx, old, None)
    clock.advance(1)
    with database.transaction(write=True) as session:
        leases.create_lease(session, ctx, "q", 1, [(T, 2)])
        with pytest.raises(errors.UnknownLeaseError):
            leases.get_lease(session, old)


def test_extend_live_renews_only_a_lease_still_live_when_it_writes(
        database: Database, ctx: ServiceContext, clock: ManualClock, table_id: int) -> None:
    """A lease read without a lock is renewed only if, when the write runs, it is still there
    and live; never shortened; released or expired meanwhile: False, nothing written."""
    with database.transaction(write=True) as session:
        lease_id = leases.create_lease(session, ctx, "q", 10, [(T, 1)]).lease_id
        other_id = leases.create_lease(session, ctx, "q", 10, [(T, 1)]).lease_id
    with database.transaction(write=False) as session:
        stale = leases_repo.get_lease(session, lease_id)
        other = leases_repo.get_lease(session, other_id)
    assert stale is not None and other is not None
    clock.advance(4_000)
    with database.transaction(write=True) as session:
        assert leases.extend_live(session, ctx, stale)
    with database.transaction(write=True) as session:
        assert leases_repo.get_lease(session, lease_id).expires_at == clock.now_ms() + 10_000
        leases.release_lease(session, lease_id)
    with database.transaction(write=True) as session:
        assert not leases.extend_live(session, ctx, stale)  # released since it was read
    clock.advance(6_000)  # the other lease expired exactly now
    with database.transaction(write=True) as session:
        assert not leases.extend_live(session, ctx, other)
        assert leases_repo.get_lease(session, other_id).expires_at == clock.now_ms()
