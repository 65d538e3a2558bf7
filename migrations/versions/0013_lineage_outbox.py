"""lineage outbox: OpenLineage events written with the change they describe, until delivered,
and each OpenLineage job's delivery state

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lineage_outbox_jobs",
        sa.Column("job", sa.String(length=400), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", sa.BigInteger(), server_default=sa.text("0"),
                  nullable=False),
        sa.Column("claimed_until", sa.BigInteger(), nullable=True),
        sa.Column("claimed_by", sa.String(length=64), nullable=True),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.PrimaryKeyConstraint("job", name=op.f("pk_lineage_outbox_jobs")),
    )
    op.create_table(
        "lineage_outbox",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("job", sa.String(length=400), nullable=False),
        sa.Column("event_type", sa.String(length=16), nullable=False),
        sa.Column("barrier", sa.BigInteger(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["job"], ["lineage_outbox_jobs.job"],
                                name=op.f("fk_lineage_outbox_job_lineage_outbox_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lineage_outbox")),
    )
    op.create_index("ix_lineage_outbox_job_id", "lineage_outbox", ["job", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_lineage_outbox_job_id", table_name="lineage_outbox")
    op.drop_table("lineage_outbox")
    op.drop_table("lineage_outbox_jobs")
