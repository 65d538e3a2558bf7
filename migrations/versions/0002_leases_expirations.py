"""snapshot usage: leases and two-phase expiration (docs/contract.md#snapshot-usage-and-expiration)

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("ttl_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leases")),
    )
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_leases_holder"), ["holder"], unique=False)
        batch_op.create_index(batch_op.f("ix_leases_expires_at"), ["expires_at"], unique=False)

    op.create_table(
        "lease_snapshots",
        sa.Column("lease_id", sa.String(length=36), nullable=False),
        sa.Column("table_id", sa.Integer(), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["lease_id"], ["leases.id"],
                                name=op.f("fk_lease_snapshots_lease_id_leases"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"],
                                name=op.f("fk_lease_snapshots_table_id_tables"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("lease_id", "table_id", "snapshot_id",
                                name=op.f("pk_lease_snapshots")),
    )
    with op.batch_alter_table("lease_snapshots", schema=None) as batch_op:
        batch_op.create_index("ix_lease_snapshots_table_snapshot", ["table_id", "snapshot_id"],
                              unique=False)

    op.create_table(
        "expirations",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("table_id", sa.Integer(), nullable=False),
        sa.Column("requested_at", sa.BigInteger(), nullable=False),
        sa.Column("completed_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"],
                                name=op.f("fk_expirations_table_id_tables"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_expirations")),
    )
    with op.batch_alter_table("expirations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_expirations_table_id"), ["table_id"], unique=False)

    op.create_table(
        "snapshot_expirations",
        sa.Column("table_id", sa.Integer(), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=False),
        sa.Column("expiration_id", sa.String(length=36), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("approved_at", sa.BigInteger(), nullable=False),
        sa.Column("expired_at", sa.BigInteger(), nullable=True),
        sa.CheckConstraint("state IN ('approved', 'expired')",
                           name=op.f("ck_snapshot_expirations_state")),
        sa.ForeignKeyConstraint(["expiration_id"], ["expirations.id"],
                                name=op.f("fk_snapshot_expirations_expiration_id_expirations"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"],
                                name=op.f("fk_snapshot_expirations_table_id_tables"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("table_id", "snapshot_id", name=op.f("pk_snapshot_expirations")),
    )
    with op.batch_alter_table("snapshot_expirations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_snapshot_expirations_expiration_id"),
                              ["expiration_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("snapshot_expirations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_snapshot_expirations_expiration_id"))
    op.drop_table("snapshot_expirations")
    with op.batch_alter_table("expirations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_expirations_table_id"))
    op.drop_table("expirations")
    with op.batch_alter_table("lease_snapshots", schema=None) as batch_op:
        batch_op.drop_index("ix_lease_snapshots_table_snapshot")
    op.drop_table("lease_snapshots")
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_leases_expires_at"))
        batch_op.drop_index(batch_op.f("ix_leases_holder"))
    op.drop_table("leases")
