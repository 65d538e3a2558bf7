"""Pooled PostgreSQL connections are pinged only after sitting idle (``db/engine.py``): none in
steady use, and a connection that died while idle is replaced before a request uses it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from metaservice.db.engine import build_engine


@pytest.fixture
def pings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """Every ping of a connection by the engines built in the test (their dialect's)."""
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    seen: list[float] = []
    original = PGDialect_psycopg.do_ping

    def counted(self: Any, dbapi_connection: Any) -> bool:
        seen.append(time.monotonic())
        return bool(original(self, dbapi_connection))

    monkeypatch.setattr(PGDialect_psycopg, "do_ping", counted)
    yield seen


def _backend_pid(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_connections_in_steady_use_are_not_pinged(postgres_url: str,
                                                  pings: list[float]) -> None:
    engine = build_engine(postgres_url, pool_size=1, max_overflow=0)
    try:
        pids = {_backend_pid(engine) for _ in range(50)}
        assert len(pids) == 1  # one pooled connection, used 50 times
        assert pings == []
    finally:
        engine.dispose()


def test_a_connection_idle_past_the_threshold_is_pinged_once_per_checkout(
        postgres_url: str, pings: list[float]) -> None:
    engine = build_engine(postgres_url, pool_size=1, max_overflow=0, ping_after_idle_s=0.05)
    try:
        _backend_pid(engine)  # opened: not pinged
        for _ in range(3):
            time.sleep(0.1)
            _backend_pid(engine)
        assert len(pings) == 3
    finally:
        engine.dispose()


@pytest.mark.parametrize("idle_threshold_s, replaced", [(0.05, True), (60.0, False)])
def test_a_connection_that_died_while_idle(postgres_url: str, idle_threshold_s: float,
                                           replaced: bool) -> None:
    """Past the threshold, the ping finds it dead and the pool opens another one, unseen by the
    caller; within it (the case the threshold accepts), the statement fails as a disconnect."""
    engine = build_engine(postgres_url, pool_size=1, max_overflow=0,
                          ping_after_idle_s=idle_threshold_s)
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    try:
        first = _backend_pid(engine)
        with admin.connect() as connection:
            assert connection.execute(text("SELECT pg_terminate_backend(:pid)"),
                                      {"pid": first}).scalar_one()
        time.sleep(0.2)
        if replaced:
            assert _backend_pid(engine) != first
        else:
            with pytest.raises(OperationalError):
                _backend_pid(engine)
            assert _backend_pid(engine) != first  # the pool replaced it after the failure
    finally:
        engine.dispose()
        admin.dispose()
