"""catalog: scan plans (server-side scan planning) and their tasks; a plan is a lease (same
id) holding the snapshots it planned, so it goes with its lease (cancelled, or forgotten after
it expired)

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "catalog_scan_plans",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("table_uuid", sa.String(length=36), nullable=False),
        sa.Column("prefix", sa.String(length=200), nullable=True),
        sa.Column("tasks", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["id"], ["leases.id"], ondelete="CASCADE",
                                name=op.f("fk_catalog_scan_plans_id_leases")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_catalog_scan_plans")),
    )
    op.create_table(
        "catalog_scan_plan_tasks",
        sa.Column("plan_id", sa.String(length=36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["plan_id"], ["catalog_scan_plans.id"], ondelete="CASCADE",
            name=op.f("fk_catalog_scan_plan_tasks_plan_id_catalog_scan_plans")),
        sa.PrimaryKeyConstraint("plan_id", "seq", name=op.f("pk_catalog_scan_plan_tasks")),
    )


def downgrade() -> None:
    op.drop_table("catalog_scan_plan_tasks")
    op.drop_table("catalog_scan_plans")
