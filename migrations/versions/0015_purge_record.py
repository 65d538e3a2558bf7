"""catalog: a purge recorded with its drop, until it finished: the dropped table's uuid, the
locations it claimed (kept claimed meanwhile), its last metadata file, and the claim of the
server process purging it, so a purge a crash interrupted is finished after the restart

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "catalog_purges",
        sa.Column("table_uuid", sa.String(length=36), nullable=False),
        sa.Column("metadata_location", sa.String(length=2048), nullable=False),
        sa.Column("claims", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("claimed_until", sa.BigInteger(), nullable=True),
        sa.Column("claimed_by", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("table_uuid", name=op.f("pk_catalog_purges")),
    )


def downgrade() -> None:
    op.drop_table("catalog_purges")
