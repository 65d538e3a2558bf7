"""leases belong to the principal that took them (docs/contract.md#leases)

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL: taken with authentication off, so by no token; only an admin sees such a lease.
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("principal", sa.String(length=200), nullable=True))
        batch_op.create_index(batch_op.f("ix_leases_principal"), ["principal"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_leases_principal"))
        batch_op.drop_column("principal")
