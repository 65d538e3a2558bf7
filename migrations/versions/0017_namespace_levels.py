"""names as the Iceberg REST specification has them: a namespace of several levels is stored as
its levels joined by the unit separator (\\x1f), up to 255 characters; existing one-level names
are stored as they were

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_WIDENED = (("tables", "database"), ("catalog_namespaces", "name"),
            ("catalog_tables", "namespace"), ("catalog_views", "namespace"),
            ("catalog_scan_plans", "namespace"))


def _resize(length_from: int, length_to: int) -> None:
    for table, column in _WIDENED:
        with op.batch_alter_table(table) as batch:
            batch.alter_column(column, type_=sa.String(length=length_to),
                               existing_type=sa.String(length=length_from),
                               existing_nullable=False)


def upgrade() -> None:
    _resize(128, 255)


def downgrade() -> None:
    _resize(255, 128)
