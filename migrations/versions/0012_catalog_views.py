"""the built-in Iceberg catalog: Iceberg views (the SQL objects of the view specification)

A view's pointer (its current metadata file) with the compare-and-swap counter of its commits,
and its view-uuid, which no two views share (a register of a view the catalog has already is
refused).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "catalog_views",
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("metadata_location", sa.String(length=2048), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("view_uuid", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "name", name=op.f("pk_catalog_views")),
    )
    op.create_index("ux_catalog_views_view_uuid", "catalog_views", ["view_uuid"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_catalog_views_view_uuid", table_name="catalog_views")
    op.drop_table("catalog_views")
