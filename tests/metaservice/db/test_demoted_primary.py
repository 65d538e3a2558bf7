"""A primary demoted under the server (a failover manager such as Patroni made it a standby):
its connections are healthy but refuse writes (SQLSTATE 25006). The request is answered 503
``database_unavailable`` with ``Retry-After``, never a 500, and the pool is emptied, so the next
request connects again — to the new primary — without a restart."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from metaservice.app import create_app
from metaservice.db.engine import build_engine, server_gone
from metaservice.db.migrate import upgrade_to_head
from metaservice.db.session import Database
from metaservice.settings import Settings

pytestmark = pytest.mark.slow  # PostgreSQL


class Demotable:
    """While ``demoted``, every connection the pool hands out is made read-only for good (a
    session setting), as a standby's connections are."""

    def __init__(self, database: Database) -> None:
        self.demoted = False

        @event.listens_for(database.engine, "checkout")
        def _checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
            if self.demoted:
                cursor = dbapi_connection.cursor()
                cursor.execute("SET default_transaction_read_only = on")
                cursor.close()
                dbapi_connection.commit()


def test_a_demoted_primary_answers_503_and_the_pool_reconnects(postgres_url: str) -> None:
    database = Database(build_engine(postgres_url))
    upgrade_to_head(database.engine)
    demotable = Demotable(database)
    table = f"t{uuid.uuid4().hex[:8]}"
    report = f"/tables/lake/demoted/{table}/barriers"
    try:
        with TestClient(create_app(Settings(database_url=postgres_url), database=database),
                        raise_server_exceptions=False) as client:
            assert client.post(report, json={"snapshot_id": 1}).status_code == 200
            demotable.demoted = True
            # the root reports' committer gives its held connection back to the pool after
            # 50 ms without a report (barriers/group_commit.py): from then on every connection
            # is taken from the pool, and made a standby's
            time.sleep(0.3)
            for snapshot in (2, 3):  # a root report, on the driver's own cursor
                answer = client.post(report, json={"snapshot_id": snapshot})
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"]["code"] == "database_unavailable"
                assert answer.headers["Retry-After"] == "1"
            lease = client.post("/leases", json={"holder": "h", "ttl_seconds": 60, "snapshots": [
                {"table": f"lake.demoted.{table}", "snapshot_id": 1}]})
            assert lease.status_code == 503, lease.text
            assert lease.json()["error"]["code"] == "database_unavailable"
            # the catalog answers in the Iceberg error model, 503 too
            namespace = client.post("/iceberg/v1/namespaces", json={"namespace": [table]})
            assert namespace.status_code == 503, namespace.text
            assert namespace.json()["error"]["code"] == 503
            assert namespace.headers["Retry-After"] == "1"
            # the new primary: connections made from now on take writes. The read-only ones
            # were dropped with the pool (else this would be refused again)
            demotable.demoted = False
            assert client.post(report, json={"snapshot_id": 4}).status_code == 200
            assert client.get(f"/version/strong/lake/demoted/{table}").json()[
                "snapshot_id"] == 4
    finally:
        database.dispose()


def test_which_errors_mean_the_server_is_gone() -> None:
    import psycopg

    assert server_gone(psycopg.errors.ReadOnlySqlTransaction())
    assert server_gone(psycopg.errors.AdminShutdown())
    assert server_gone(psycopg.errors.CannotConnectNow())
    assert not server_gone(psycopg.errors.UniqueViolation())
    assert not server_gone(None)
