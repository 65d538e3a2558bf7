"""catalog: an Idempotency-Key bound to its request (the path it was sent to, and a digest of
the path, query and body), so a reuse of it for anything else is refused rather than answered

Rows recorded before this revision keep NULL in both columns and are replayed, as before, to a
request of the same operation until they expire (``METASERVICE_IDEMPOTENCY_KEY_SECONDS``).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("catalog_idempotency_keys",
                  sa.Column("target", sa.String(length=1024), nullable=True))
    op.add_column("catalog_idempotency_keys",
                  sa.Column("request_digest", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("catalog_idempotency_keys") as batch:
        batch.drop_column("request_digest")
        batch.drop_column("target")
