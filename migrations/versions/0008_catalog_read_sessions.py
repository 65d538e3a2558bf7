"""catalog views: read sessions and the cut each serves a table at

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "catalog_read_sessions",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("view", sa.String(length=16), nullable=False),
        sa.Column("barrier", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["id"], ["leases.id"], ondelete="CASCADE",
                                name=op.f("fk_catalog_read_sessions_id_leases")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_catalog_read_sessions")),
    )
    op.create_table(
        "catalog_read_session_cuts",
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("table_id", sa.Integer(), nullable=False),
        sa.Column("barrier", sa.BigInteger(), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["catalog_read_sessions.id"], ondelete="CASCADE",
            name=op.f("fk_catalog_read_session_cuts_session_id_catalog_read_sessions")),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], ondelete="CASCADE",
                                name=op.f("fk_catalog_read_session_cuts_table_id_tables")),
        sa.PrimaryKeyConstraint("session_id", "table_id",
                                name=op.f("pk_catalog_read_session_cuts")),
    )


def downgrade() -> None:
    op.drop_table("catalog_read_session_cuts")
    op.drop_table("catalog_read_sessions")
