"""catalog tables: their identity (table-uuid) and location, each unique

A table's identity is its Iceberg table-uuid: a register of a file of a table the catalog has
already, and a table whose location lies inside another's, are refused (SPEC §11, Trust).
Rows of tables created before this revision get both at the server's next start.

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
    op.create_index("ux_catalog_tables_location", "catalog_tables", ["location"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_catalog_tables_location", table_name="catalog_tables")
    op.drop_index("ux_catalog_tables_table_uuid", table_name="catalog_tables")
    with op.batch_alter_table("catalog_tables") as batch:
        batch.drop_column("location")
        batch.drop_column("table_uuid")
