"""Storage: the engine, the ORM rows, sessions and migrations."""
