"""rollback plans and their fences (docs/contract.md#rollback-plans); an index for the delay window
(docs/contract.md#delay)

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("barriers", schema=None) as batch_op:
        batch_op.create_index("ix_barriers_committed_at", ["committed_at"], unique=False)

    op.create_table(
        "rollback_plans",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("table_id", sa.Integer(), nullable=False),
        sa.Column("barrier", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("applied_at", sa.BigInteger(), nullable=True),
        sa.Column("completed_at", sa.BigInteger(), nullable=True),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.CheckConstraint("state IN ('planned', 'applied', 'completed')",
                           name=op.f("ck_rollback_plans_state")),
        sa.CheckConstraint("mode IN ('incremental', 'full')", name=op.f("ck_rollback_plans_mode")),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"],
                                name=op.f("fk_rollback_plans_table_id_tables"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rollback_plans")),
    )
    with op.batch_alter_table("rollback_plans", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_rollback_plans_table_id"), ["table_id"],
                              unique=False)

    op.create_table(
        "rollback_fences",
        sa.Column("table_id", sa.Integer(), nullable=False),
        sa.Column("plan_id", sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"],
                                name=op.f("fk_rollback_fences_table_id_tables"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["plan_id"], ["rollback_plans.id"],
                                name=op.f("fk_rollback_fences_plan_id_rollback_plans"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("table_id", name=op.f("pk_rollback_fences")),
    )
    with op.batch_alter_table("rollback_fences", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_rollback_fences_plan_id"), ["plan_id"],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table("rollback_fences", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_rollback_fences_plan_id"))
    op.drop_table("rollback_fences")
    with op.batch_alter_table("rollback_plans", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_rollback_plans_table_id"))
    op.drop_table("rollback_plans")
    with op.batch_alter_table("barriers", schema=None) as batch_op:
        batch_op.drop_index("ix_barriers_committed_at")
