"""The schema is Alembic's: upgrading from empty gives exactly the models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from metaservice.db.migrate import current_revision, head_revision
from metaservice.db.models import Base
from metaservice.db.session import Database


def test_upgrade_from_empty_matches_the_models(database: Database) -> None:
    assert current_revision(database.engine) == head_revision()
    with database.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        diff = compare_metadata(context, Base.metadata)
    assert diff == []
