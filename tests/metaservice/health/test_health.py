"""The liveness and readiness probes: ready only when the database is reachable and migrated
to the head revision."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from sqlalchemy import create_engine

from metaservice.db.migrate import head_revision
from metaservice.db.session import Database
from metaservice.health.endpoints import readyz


def _body(response) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(response.body)


def test_probes_answer_on_a_migrated_database(client: httpx.Client, database: Database) -> None:
    """/healthz is ok and /readyz names the head revision and the backend."""
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "revision": head_revision(),
                            "backend": database.dialect}


def test_an_unmigrated_database_is_not_ready(tmp_path: Path) -> None:
    """A reachable database without the schema answers 503 not_migrated with both revisions."""
    database = Database(create_engine(f"sqlite:///{tmp_path / 'empty.db'}"))
    try:
        response = readyz(database)
    finally:
        database.dispose()
    assert response.status_code == 503
    assert _body(response)["error"] == {
        "code": "not_migrated", "message": "the database schema is not at the head revision",
        "details": {"current": None, "head": head_revision()}}


def test_an_unreachable_database_is_not_ready() -> None:
    """A database that refuses connections answers 503 database_unavailable."""
    database = Database(create_engine("postgresql+psycopg://postgres@127.0.0.1:1/none",
                                      connect_args={"connect_timeout": 2}))
    try:
        response = readyz(database)
    finally:
        database.dispose()
    assert response.status_code == 503
    assert _body(response)["error"]["code"] == "database_unavailable"
