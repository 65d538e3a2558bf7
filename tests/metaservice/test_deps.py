"""The session dependencies own the transaction: it has ended, committed or rolled back, by the
time the answer is sent, an error's included."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from metaservice.db.session import Database

# Refusals raised inside a read or a write transaction, in the core API and in the catalog.
REFUSED = [
    ("GET", "/jobs/nope", None, 404),
    ("POST", "/jobs/nope/start", {}, 404),
    ("POST", "/iceberg/v1/namespaces", {"namespace": ["db"]}, 409),
    ("HEAD", "/iceberg/v1/namespaces/db/tables/nope", None, 404),
]


@pytest.mark.parametrize("method, path, body, status", REFUSED,
                         ids=[f"{m} {p}" for m, p, _, _ in REFUSED])
def test_a_refusal_ends_its_transaction_before_it_is_answered(
        app: FastAPI, database: Database, method: str, path: str, body: dict | None,
        status: int) -> None:
    with TestClient(app) as client:
        client.post("/iceberg/v1/namespaces", json={"namespace": ["db"]})
        for _ in range(3):
            response = client.request(method, path, json=body)
            assert response.status_code == status, response.text
            assert database.engine.pool.checkedout() == 0
        # On SQLite an open write transaction would hold the write lock: this write would wait.
        assert client.post("/iceberg/v1/namespaces", json={"namespace": ["other"]}).is_success


def test_a_refusal_over_the_network_leaves_no_connection_checked_out(
        client: httpx.Client, database: Database) -> None:
    client.post("/iceberg/v1/namespaces", json={"namespace": ["db"]})
    for _ in range(3):
        assert client.post("/iceberg/v1/namespaces", json={"namespace": ["db"]}).status_code == 409
        assert database.engine.pool.checkedout() == 0
