"""the built-in Iceberg catalog: namespaces and table pointers

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "catalog_namespaces",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_catalog_namespaces")),
    )
    op.create_table(
        "catalog_tables",
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("metadata_location", sa.String(length=2048), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "name", name=op.f("pk_catalog_tables")),
    )


def downgrade() -> None:
    op.drop_table("catalog_tables")
    op.drop_table("catalog_namespaces")
