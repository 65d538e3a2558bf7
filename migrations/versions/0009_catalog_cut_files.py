"""catalog views: the cut files served, so that those of expired snapshots can be deleted

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "catalog_cut_files",
        sa.Column("location", sa.String(length=2048), nullable=False),
        sa.Column("table_uuid", sa.String(length=36), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("location", name=op.f("pk_catalog_cut_files")),
    )
    op.create_index("ix_catalog_cut_files_table_snapshot", "catalog_cut_files",
                    ["table_uuid", "snapshot_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_catalog_cut_files_table_snapshot", table_name="catalog_cut_files")
    op.drop_table("catalog_cut_files")
