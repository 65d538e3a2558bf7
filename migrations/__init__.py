"""Alembic migrations: the only way the MetaService schema is created or changed."""
