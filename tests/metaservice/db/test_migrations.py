"""The schema is Alembic's: upgrading from empty gives exactly the models."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from metaservice.db.migrate import alembic_config, current_revision, head_revision, upgrade_to_head
from metaservice.db.models import Base
from metaservice.db.session import Database


def test_upgrade_from_empty_matches_the_models(database: Database) -> None:
    assert current_revision(database.engine) == head_revision()
    with database.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        diff = compare_metadata(context, Base.metadata)
    assert diff == []


def test_the_cut_files_migration_downgrades_and_upgrades_again(database: Database) -> None:
    """0009 (read sessions' cut files) is undone by its downgrade, to exactly 0008's schema, and
    redone to the models."""
    config = alembic_config(database.engine.url.render_as_string(hide_password=False))

    def tables() -> set[str]:
        return set(inspect(database.engine).get_table_names())

    assert "catalog_cut_files" in tables()
    try:
        with database.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0008")
        assert current_revision(database.engine) == "0008"
        assert "catalog_cut_files" not in tables()
        assert "catalog_read_session_cuts" in tables()
    finally:
        upgrade_to_head(database.engine)
    assert "catalog_cut_files" in tables()
    test_upgrade_from_empty_matches_the_models(database)


def test_the_idempotency_binding_migration_carries_existing_keys_over(
        database: Database) -> None:
    """0014 binds a key to its request; a key recorded before it stays, unbound (NULL), and
    its downgrade keeps the rows too."""
    config = alembic_config(database.engine.url.render_as_string(hide_password=False))
    row = {"principal": "p", "key": "0123456789abcdef0123456789abcdef0123", "operation":
           "commitTable", "status": 200, "outcome": '{"metadata-location": "x"}',
           "created_at": 1, "expires_at": 2}
    try:
        with database.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0013")
        with database.engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO catalog_idempotency_keys (principal, key, operation, status, "
                "outcome, created_at, expires_at) VALUES (:principal, :key, :operation, "
                ":status, :outcome, :created_at, :expires_at)"), row)
        upgrade_to_head(database.engine)
        with database.engine.connect() as connection:
            carried = connection.execute(text(
                "SELECT principal, key, operation, status, target, request_digest "
                "FROM catalog_idempotency_keys")).all()
        assert [tuple(r) for r in carried] == [("p", row["key"], "commitTable", 200, None,
                                                None)]
        with database.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0013")
        with database.engine.connect() as connection:
            assert connection.scalar(text("SELECT count(*) FROM catalog_idempotency_keys")) == 1
    finally:
        upgrade_to_head(database.engine)
    test_upgrade_from_empty_matches_the_models(database)


def test_the_namespace_levels_migration_carries_names_over_and_widens_them(
        database: Database) -> None:
    """0017 stores a namespace as its levels joined by ``\\x1f``, up to 255 characters: the
    one-level names of before are carried over as they were (their addresses do not change),
    and a namespace past the old 128 characters fits once it ran."""
    config = alembic_config(database.engine.url.render_as_string(hide_password=False))
    long_namespace = "\x1f".join(["n" * 120, "m" * 120])  # 241 characters
    try:
        with database.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0016")
        with database.engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO tables (catalog, database, name, created_at) "
                "VALUES ('lake', 'db', 'orders', 1)"))
            connection.execute(text(
                "INSERT INTO catalog_namespaces (name, properties, created_at) "
                "VALUES ('db', '{}', 1)"))
        upgrade_to_head(database.engine)
        with database.engine.begin() as connection:
            assert connection.execute(text(
                "SELECT catalog, database, name FROM tables")).all() == [("lake", "db", "orders")]
            assert connection.scalar(text("SELECT name FROM catalog_namespaces")) == "db"
            connection.execute(text(
                "INSERT INTO catalog_namespaces (name, properties, created_at) "
                "VALUES (:name, '{}', 1)"), {"name": long_namespace})
            connection.execute(text(
                "INSERT INTO tables (catalog, database, name, created_at) "
                "VALUES ('lake', :name, 't', 1)"), {"name": long_namespace})
            assert connection.scalar(text(
                "SELECT count(*) FROM tables WHERE database = :name"),
                {"name": long_namespace}) == 1
    finally:
        with database.engine.begin() as connection:
            connection.execute(text("DELETE FROM tables"))
            connection.execute(text("DELETE FROM catalog_namespaces"))
        upgrade_to_head(database.engine)
    test_upgrade_from_empty_matches_the_models(database)
