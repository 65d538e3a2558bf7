"""Alembic, driven from code: the CLI, the server start and the tests use these."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

_PACKAGE = Path(__file__).resolve().parent.parent


def script_location() -> Path:
    """The Alembic revisions: ``metaservice/_migrations/`` in an installed wheel, the
    repository's ``migrations/`` in a checkout (an editable install or ``PYTHONPATH``)."""
    for candidate in (_PACKAGE / "_migrations", _PACKAGE.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise RuntimeError(f"no Alembic migrations next to {_PACKAGE} (neither _migrations/ inside "
                       "it nor migrations/ beside it)")


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    # ConfigParser interpolation: a literal % in a password must be doubled.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


# Any constant: serialises `upgrade` across server processes starting at once on PostgreSQL.
_MIGRATION_LOCK_KEY = 0x6D657461


def upgrade_to_head(engine: Engine) -> None:
    """Migrate to the newest revision. Safe when several processes start together: on
    PostgreSQL they take turns on an advisory lock (SQLite serialises writers itself)."""
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                               {"key": _MIGRATION_LOCK_KEY})
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    config = alembic_config("sqlite://")
    return ScriptDirectory.from_config(config).get_current_head()
