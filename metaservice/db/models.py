"""Database rows. The schema itself is created and changed only by Alembic migrations
(``migrations/``); a test proves ``alembic upgrade head`` matches these models.

Times are integer milliseconds since the Unix epoch, like barriers.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from metaservice.names import NAMESPACE_MAX, qualified

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class TopologyState(Base):
    """One row. Its version changes whenever the topology (running jobs) changes; taking its
    row lock serialises topology changes across every server process."""

    __tablename__ = "topology_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)


class TableRow(Base):
    __tablename__ = "tables"
    __table_args__ = (UniqueConstraint("catalog", "database", "name", name="uq_tables_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    catalog: Mapped[str] = mapped_column(String(128), nullable=False)
    database: Mapped[str] = mapped_column(String(NAMESPACE_MAX), nullable=False)
    name: Mapped[str] = mapped_column(String(128), nullable=False)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    # latest(T): greatest completed barrier not rolled back, and its snapshot (denormalised from
    # ``barriers`` so a version answer never scans history; updated by compare-and-swap).
    latest_barrier: Mapped[int | None] = mapped_column(BigInteger)
    latest_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    latest_committed_at: Mapped[int | None] = mapped_column(BigInteger)
    # The running job that writes this table, if any (docs/contract.md#one-writer-per-table).
    writer_job: Mapped[str | None] = mapped_column(String(200), index=True)
    # True while the table is behind the strong cut of the component it joined
    # (docs/contract.md#catching-up).
    catching_up: Mapped[bool] = mapped_column(
        Boolean, nullable=False, default=False, server_default=text("false")
    )
    # While catching up: the strong cut its component had when it joined (None: none then).
    catch_up_floor: Mapped[int | None] = mapped_column(BigInteger)

    @property
    def qualified_name(self) -> str:
        return qualified(self.catalog, self.database, self.name)


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint("state IN ('planned', 'running', 'terminated')", name="state"),
    )

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    state: Mapped[str] = mapped_column(String(16), nullable=False, index=True)
    run: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    owner: Mapped[str | None] = mapped_column(String(200))
    registered_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    started_at: Mapped[int | None] = mapped_column(BigInteger)
    terminated_at: Mapped[int | None] = mapped_column(BigInteger)
    updated_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    last_committed_barrier: Mapped[int | None] = mapped_column(BigInteger)
    # The pinned barrier (docs/contract.md#next): the same answer until commit or abort.
    pinned_barrier: Mapped[int | None] = mapped_column(BigInteger)
    pinned_after: Mapped[int | None] = mapped_column(BigInteger)
    pinned_at: Mapped[int | None] = mapped_column(BigInteger)
    # {"c.d.t": {"barrier": b, "snapshot_id": s}} at the pinned barrier and at ``after``.
    pinned_snapshots: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    pinned_previous: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Set when a rollback invalidated the pinned barrier: the next answer is "abort".
    pin_invalidated_reason: Mapped[str | None] = mapped_column(String(500))


class JobTableRow(Base):
    """A registered edge: the job reads (source) or writes (sink) the table."""

    __tablename__ = "job_tables"
    __table_args__ = (CheckConstraint("role IN ('source', 'sink')", name="role"),)

    job_name: Mapped[str] = mapped_column(
        String(200), ForeignKey("jobs.name", ondelete="CASCADE"), primary_key=True
    )
    table_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("tables.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[str] = mapped_column(String(8), primary_key=True)


class BarrierRow(Base):
    """Table T completed barrier B with snapshot S (docs/contract.md#barriers)."""

    __tablename__ = "barriers"
    __table_args__ = (Index("ix_barriers_table_snapshot", "table_id", "snapshot_id"),)

    table_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("tables.id", ondelete="CASCADE"), primary_key=True
    )
    barrier: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    snapshot_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    committed_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    writer_job: Mapped[str | None] = mapped_column(String(200))
    writer_run: Mapped[int | None] = mapped_column(Integer)
    rolled_back: Mapped[bool] = mapped_column(
        Boolean, nullable=False, default=False, server_default=text("false")
    )


class JobProgressRow(Base):
    """One job's work on one barrier: when it was handed out, committed, how many attempts."""

    __tablename__ = "job_progress"
    __table_args__ = (
        CheckConstraint(
            "state IN ('in_progress', 'aborted', 'committed', 'invalidated')", name="state"
        ),
        Index("ix_job_progress_finished_at", "finished_at"),
    )

    job_name: Mapped[str] = mapped_column(
        String(200), ForeignKey("jobs.name", ondelete="CASCADE"), primary_key=True
    )
    run: Mapped[int] = mapped_column(Integer, primary_key=True)
    barrier: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    started_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    # When B was complete in all the job's sources (start of the hop latency).
    sources_ready_at: Mapped[int | None] = mapped_column(BigInteger)
    finished_at: Mapped[int | None] = mapped_column(BigInteger)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    last_abort_reason: Mapped[str | None] = mapped_column(String(500))
    snapshots: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    previous: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)


# -- Leases and two-phase expiration (docs/contract.md#snapshot-usage-and-expiration) --------------

class LeaseRow(Base):
    """A holder's promise to read some snapshots until ``expires_at``; while it is live, none of
    them may be approved for expiration. An expired lease protects nothing."""

    __tablename__ = "leases"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200), nullable=False, index=True)
    # The token that took the lease: only it or an admin sees, renews or releases the lease.
    # ``None`` when authentication is off (one principal, every caller).
    principal: Mapped[str | None] = mapped_column(String(200), nullable=True, index=True)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    # The term granted at creation; a renewal without a TTL grants it again.
    ttl_ms: Mapped[int] = mapped_column(BigInteger, nullable=False)
    expires_at: Mapped[int] = mapped_column(BigInteger, nullable=False, index=True)


class LeaseSnapshotRow(Base):
    """One snapshot held by a lease."""

    __tablename__ = "lease_snapshots"
    __table_args__ = (Index("ix_lease_snapshots_table_snapshot", "table_id", "snapshot_id"),)

    lease_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("leases.id", ondelete="CASCADE"), primary_key=True
    )
    table_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("tables.id", ondelete="CASCADE"), primary_key=True
    )
    snapshot_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)


class ExpirationRow(Base):
    """One maintenance run's request to expire snapshots of one table (phase one), completed
    when the tool reports what it really deleted (phase two)."""

    __tablename__ = "expirations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    table_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("tables.id", ondelete="CASCADE"), nullable=False, index=True
    )
    requested_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    completed_at: Mapped[int | None] = mapped_column(BigInteger)


class SnapshotExpirationRow(Base):
    """A snapshot approved for expiration (``approved``), later confirmed deleted
    (``expired``). From approval on it is never handed out or leased again
    (docs/contract.md#expired-snapshots-stay-gone); the primary key makes one snapshot's approval a
    single row whoever races for it."""

    __tablename__ = "snapshot_expirations"
    __table_args__ = (CheckConstraint("state IN ('approved', 'expired')", name="state"),)

    table_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("tables.id", ondelete="CASCADE"), primary_key=True
    )
    snapshot_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    expiration_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("expirations.id", ondelete="CASCADE"), nullable=False, index=True
    )
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    approved_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    expired_at: Mapped[int | None] = mapped_column(BigInteger)


# -- Delay and rollback (docs/contract.md#delay, docs/contract.md#rollback-plans) ------------------

# The delay percentiles read the barriers committed within a window.
Index("ix_barriers_committed_at", BarrierRow.committed_at)


class RollbackPlanRow(Base):
    """A rollback of ``table`` at ``barrier`` and everything downstream
    (docs/contract.md#rollback-plans).

    ``planned`` → ``applied`` (barriers > B rolled back, the affected tables fenced: no commit,
    no root report, jobs wait) → ``completed`` (the Iceberg tables were rolled back; the fence
    is lifted). ``document`` is the plan as answered, refreshed when it is applied.
    """

    __tablename__ = "rollback_plans"
    __table_args__ = (
        CheckConstraint("state IN ('planned', 'applied', 'completed')", name="state"),
        CheckConstraint("mode IN ('incremental', 'full')", name="mode"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    table_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("tables.id", ondelete="CASCADE"), nullable=False, index=True
    )
    barrier: Mapped[int] = mapped_column(BigInteger, nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    mode: Mapped[str] = mapped_column(String(16), nullable=False)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    applied_at: Mapped[int | None] = mapped_column(BigInteger)
    completed_at: Mapped[int | None] = mapped_column(BigInteger)
    document: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)


class RollbackFenceRow(Base):
    """A table fenced by an applied rollback plan until the plan is completed."""

    __tablename__ = "rollback_fences"

    table_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("tables.id", ondelete="CASCADE"), primary_key=True
    )
    plan_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("rollback_plans.id", ondelete="CASCADE"), nullable=False,
        index=True
    )


class ApiTokenRow(Base):
    """A bearer token: its name, role and SHA-256 hash (the value itself is never stored)."""

    __tablename__ = "api_tokens"
    __table_args__ = (
        CheckConstraint("role IN ('reader', 'writer', 'admin')", name="role"),
        UniqueConstraint("token_hash", name="uq_api_tokens_token_hash"),
    )

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    token_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    revoked_at: Mapped[int | None] = mapped_column(BigInteger)


class IcebergNamespaceRow(Base):
    """A namespace of the built-in Iceberg catalog (docs/contract.md#the-built-in-catalog): the
    database part of a name."""

    __tablename__ = "catalog_namespaces"

    name: Mapped[str] = mapped_column(String(NAMESPACE_MAX), primary_key=True)
    properties: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


class IcebergTableRow(Base):
    """A table's pointer in the built-in Iceberg catalog: its current metadata file. ``version``
    is the compare-and-swap counter of every pointer swap (docs/contract.md#concurrency)."""

    __tablename__ = "catalog_tables"
    __table_args__ = (Index("ux_catalog_tables_table_uuid", "table_uuid", unique=True),)

    namespace: Mapped[str] = mapped_column(String(NAMESPACE_MAX), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    metadata_location: Mapped[str] = mapped_column(String(2048), nullable=False)
    version: Mapped[int] = mapped_column(BigInteger, nullable=False)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    updated_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    # The table's identity (its metadata's table-uuid): no two tables share it
    # (docs/contract.md#files-stay-inside-the-warehouse). Null only for a row older than it, until
    # the server's next start fills it.
    table_uuid: Mapped[str | None] = mapped_column(String(36))
    # Its current location, normalised (``Warehouse.key``): what lineage names it by.
    location: Mapped[str | None] = mapped_column(String(2048))


class CatalogLocationRow(Base):
    """A location a catalog table's files may lie under (its location, each it had before, its
    ``write.*.path`` properties), normalised as ``Warehouse.key`` gives it. Claimed by the table
    until it is dropped; no claim lies inside another table's
    (docs/contract.md#files-stay-inside-the-warehouse)."""

    __tablename__ = "catalog_locations"

    location: Mapped[str] = mapped_column(String(2048), primary_key=True)
    table_uuid: Mapped[str] = mapped_column(String(36), nullable=False, index=True)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


class CatalogPurgeRow(Base):
    """A purge not finished yet: written in the transaction of the drop that asks for it, and
    deleted in the transaction that ends it, once every object under ``claims`` (the locations
    the table claimed, as ``Warehouse.key`` gives them) is gone. Until then the table's
    ``catalog_locations`` rows stay, so no table claims a location being purged. A server
    process takes a purge until ``claimed_until`` (``claimed_by`` names it) and extends that
    after each page; a crashed server's purge is taken by another, or by it restarted, once
    its claim lapsed (docs/operations.md#the-lake-on-object-storage)."""

    __tablename__ = "catalog_purges"

    table_uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    metadata_location: Mapped[str] = mapped_column(String(2048), nullable=False)
    claims: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    claimed_until: Mapped[int | None] = mapped_column(BigInteger)
    claimed_by: Mapped[str | None] = mapped_column(String(64))


class IcebergViewRow(Base):
    """An Iceberg view's pointer in the built-in catalog (the SQL object of the Iceberg view
    specification): its current metadata file. ``version`` is the compare-and-swap counter of
    its commits; ``view_uuid`` its identity, which no two views share. A view never has the name
    of a table of its namespace."""

    __tablename__ = "catalog_views"
    __table_args__ = (Index("ux_catalog_views_view_uuid", "view_uuid", unique=True),)

    namespace: Mapped[str] = mapped_column(String(NAMESPACE_MAX), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    metadata_location: Mapped[str] = mapped_column(String(2048), nullable=False)
    version: Mapped[int] = mapped_column(BigInteger, nullable=False)
    view_uuid: Mapped[str] = mapped_column(String(36), nullable=False)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    updated_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


class ReadSessionRow(Base):
    """A read session of a consistent warehouse of the catalog (docs/contract.md#read-sessions). Its
    lease (same id) holds every snapshot the session serves and gives its term: the session lives
    while its lease does, and goes with it."""

    __tablename__ = "catalog_read_sessions"

    id: Mapped[str] = mapped_column(
        String(36), ForeignKey("leases.id", ondelete="CASCADE"), primary_key=True)
    # strong | barrier (``CutKind``); the column keeps its first name, "view"
    kind: Mapped[str] = mapped_column("view", String(16), nullable=False)
    barrier: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


class ReadSessionCutRow(Base):
    """The barrier and snapshot at which a read session serves a table, fixed at its first
    load (or at the first load of its pipeline's tables)."""

    __tablename__ = "catalog_read_session_cuts"

    session_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("catalog_read_sessions.id", ondelete="CASCADE"), primary_key=True)
    table_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("tables.id", ondelete="CASCADE"), primary_key=True)
    barrier: Mapped[int] = mapped_column(BigInteger, nullable=False)
    snapshot_id: Mapped[int] = mapped_column(BigInteger, nullable=False)


class ScanPlanRow(Base):
    """A scan plan of the catalog (server-side scan planning, docs/contract.md#scan-planning). Its
    lease (same id) holds the snapshots it planned and gives its term: the plan lives while its
    lease does, and goes with it (cancelled: the lease released; expired: forgotten with it)."""

    __tablename__ = "catalog_scan_plans"

    id: Mapped[str] = mapped_column(
        String(36), ForeignKey("leases.id", ondelete="CASCADE"), primary_key=True)
    # The table planned, by its pointer's key and its identity (a later table of that name is
    # another table).
    namespace: Mapped[str] = mapped_column(String(NAMESPACE_MAX), nullable=False)
    name: Mapped[str] = mapped_column(String(128), nullable=False)
    table_uuid: Mapped[str] = mapped_column(String(36), nullable=False)
    # The read session's prefix it was planned in (None: at the head).
    prefix: Mapped[str | None] = mapped_column(String(200))
    tasks: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


class ScanPlanTaskRow(Base):
    """One plan task of a scan plan: a batch of its file scan tasks as the answer's JSON
    (``file-scan-tasks`` and the ``delete-files`` they reference)."""

    __tablename__ = "catalog_scan_plan_tasks"

    plan_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("catalog_scan_plans.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    content: Mapped[str] = mapped_column(Text, nullable=False)


class CutFileRow(Base):
    """A cut file (docs/contract.md#a-table-at-a-cut), recorded when first served: the file serves
    one snapshot of one catalog table, and is deleted with the snapshot's expiration or the table's
    purge. The table is its Iceberg ``table-uuid``: unlike its name, a rename racing a read
    session's load cannot leave a row under a name a later table takes."""

    __tablename__ = "catalog_cut_files"
    __table_args__ = (
        Index("ix_catalog_cut_files_table_snapshot", "table_uuid", "snapshot_id"),)

    location: Mapped[str] = mapped_column(String(2048), primary_key=True)
    table_uuid: Mapped[str] = mapped_column(String(36), nullable=False)
    snapshot_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


class IdempotencyKeyRow(Base):
    """A mutation of the catalog sent with an ``Idempotency-Key``, per principal: claimed in the
    transaction of the mutation itself, with the outcome a retry of it is answered (the new
    metadata file, an empty answer, or a final error), until ``expires_at``. The key is bound
    to the request that claimed it: its operation, the path it was sent to (``target``) and a
    digest of its path, query and body; both are NULL for keys recorded before they existed
    (migration 0014), which are bound by operation only."""

    __tablename__ = "catalog_idempotency_keys"

    principal: Mapped[str] = mapped_column(String(200), primary_key=True)  # "" without auth
    key: Mapped[str] = mapped_column(String(36), primary_key=True)
    operation: Mapped[str] = mapped_column(String(64), nullable=False)
    target: Mapped[str | None] = mapped_column(String(1024))
    request_digest: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[int | None] = mapped_column(Integer)
    outcome: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    expires_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


# -- OpenLineage (docs/contract.md#lineage): events waiting to be delivered ------------------------


class LineageOutboxRow(Base):
    """An OpenLineage event, written in the transaction of the hand-out, commit, root report or
    abort it describes, and deleted once delivered. ``id`` orders the events of one job: they
    are written under the job's row lock (or its root table's)."""

    __tablename__ = "lineage_outbox"
    __table_args__ = (Index("ix_lineage_outbox_job_id", "job", "id"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    # The OpenLineage job's name (its namespace is in the payload).
    job: Mapped[str] = mapped_column(
        String(400), ForeignKey("lineage_outbox_jobs.job"), nullable=False)
    event_type: Mapped[str] = mapped_column(String(16), nullable=False)
    barrier: Mapped[int] = mapped_column(BigInteger, nullable=False)
    payload: Mapped[str] = mapped_column(Text, nullable=False)  # the RunEvent's JSON
    created_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


class LineageOutboxJobRow(Base):
    """One row per OpenLineage job that ever had an event: its delivery state. A sender claims
    a job (until ``claimed_until``) and delivers its events in order; a failed delivery makes
    the job wait until ``next_attempt_at``. A crashed sender's claim lapses and another sender
    delivers (at least once). Rows are few (one per job and root table) and kept."""

    __tablename__ = "lineage_outbox_jobs"

    job: Mapped[str] = mapped_column(String(400), primary_key=True)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0,
                                          server_default=text("0"))
    next_attempt_at: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0,
                                                 server_default=text("0"))
    claimed_until: Mapped[int | None] = mapped_column(BigInteger)
    claimed_by: Mapped[str | None] = mapped_column(String(64))
    last_error: Mapped[str | None] = mapped_column(String(500))
