"""catalog tables: their identity (table-uuid), and the locations each claims

A table's identity is its Iceberg table-uuid: a register of a file of a table the catalog has
already is refused. Every location a table's files may lie under — its location, each one it
had before, and its ``write.*.path`` properties — is claimed by it until it is dropped, and no
claim lies inside another table's (docs/contract.md#files-stay-inside-the-warehouse). Rows of tables
created before this revision get both at the server's next start.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("catalog_tables") as batch:
        batch.add_column(sa.Column("table_uuid", sa.String(length=36), nullable=True))
        batch.add_column(sa.Column("location", sa.String(length=2048), nullable=True))
    op.create_index("ux_catalog_tables_table_uuid", "catalog_tables", ["table_uuid"],
                    unique=True)
    op.create_table(
        "catalog_locations",
        sa.Column("location", sa.String(length=2048), nullable=False),
        sa.Column("table_uuid", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("location", name=op.f("pk_catalog_locations")),
    )
    op.create_index("ix_catalog_locations_table_uuid", "catalog_locations", ["table_uuid"])


def downgrade() -> None:
    op.drop_index("ix_catalog_locations_table_uuid", table_name="catalog_locations")
    op.drop_table("catalog_locations")
    op.drop_index("ux_catalog_tables_table_uuid", table_name="catalog_tables")
    with op.batch_alter_table("catalog_tables") as batch:
        batch.drop_column("location")
        batch.drop_column("table_uuid")
