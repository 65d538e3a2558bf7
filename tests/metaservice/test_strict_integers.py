"""Integers are JSON integers (docs/contract.md#barriers): a boolean, a string or a number with a
fraction is 422 ``invalid_request`` in every request body, and an integer in a URL is written in
digits only. Seconds (lease terms) are JSON numbers: a boolean or a string is refused. Nothing is
recorded."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.metaservice.barriers.test_barriers import commit, root
from tests.metaservice.jobs.test_jobs import plan
from tests.metaservice.test_errors import assert_error

NOT_INTEGERS = [True, "10", 10.0]
NOT_SECONDS = [True, "60"]


def _setup(client: httpx.Client) -> str:
    """a {10: 1} → etl (pinned at 10) → b, and a lease on a's snapshot; the lease's id."""
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    assert root(client, "lake.db.a", 1, 10).status_code == 200
    assert client.post("/jobs/etl/start").json()["barrier"] == 10
    lease = client.post("/leases", json={"holder": "q", "ttl_seconds": 60, "snapshots": [
        {"table": "lake.db.a", "snapshot_id": 1}]})
    assert lease.status_code == 201
    return str(lease.json()["lease_id"])


def _bodies(value: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """Requests otherwise valid after :func:`_setup`, with ``value`` where an integer goes."""
    return [
        ("POST", "/tables/lake/db/a/barriers", {"snapshot_id": 2, "barrier": value}),
        ("POST", "/tables/lake/db/a/barriers", {"snapshot_id": value, "barrier": 20}),
        ("POST", "/commit/etl/lake/db/b", {"barrier": value, "snapshot_id": 5}),
        ("POST", "/commit/etl/lake/db/b", {"barrier": 10, "snapshot_id": value}),
        ("POST", "/jobs/etl/barriers/next", {"after": value}),
        ("POST", "/versions", {"tables": ["lake.db.a"], "barrier": value}),
        ("POST", "/leases", {"holder": "q", "ttl_seconds": 60,
                             "snapshots": [{"table": "lake.db.a", "snapshot_id": value}]}),
        ("POST", "/tables/lake/db/a/expirations", {"snapshot_ids": [value],
                                                   "approve_unknown": True}),
        ("POST", "/rollback-plans", {"table": "lake.db.a", "barrier": value}),
    ]


@pytest.mark.parametrize("value", NOT_INTEGERS, ids=["true", "string", "fraction"])
def test_integers_in_bodies_are_json_integers(client: httpx.Client, value: Any) -> None:
    _setup(client)
    for method, url, body in _bodies(value):
        assert_error(client.request(method, url, json=body), 422, "invalid_request")
    # Nothing changed: a's history, b's, the pin, the plans.
    assert [b["barrier"] for b in client.get("/tables/lake/db/a/barriers").json()["barriers"]] \
        == [10]
    assert client.get("/tables/lake/db/b/barriers").json()["barriers"] == []
    assert client.get("/jobs/etl").json()["pinned_barrier"] == 10
    assert client.get("/rollback-plans").json()["plans"] == []
    assert client.get("/tables/lake/db/a/snapshots/protected").json()["snapshots"] != []


@pytest.mark.parametrize("value", NOT_INTEGERS, ids=["true", "string", "fraction"])
def test_a_start_barrier_is_a_json_integer(client: httpx.Client, value: Any) -> None:
    plan(client, "etl", ["lake.db.a"], ["lake.db.b"])
    root(client, "lake.db.a", 1, 10)
    assert_error(client.post("/jobs/etl/start", json={"from": value}), 422, "invalid_request")
    assert client.get("/jobs/etl").json()["state"] == "planned"


@pytest.mark.parametrize("value", NOT_SECONDS, ids=["true", "string"])
def test_lease_seconds_are_json_numbers(client: httpx.Client, value: Any) -> None:
    lease_id = _setup(client)
    assert_error(client.post("/leases", json={"holder": "q", "ttl_seconds": value, "snapshots": [
        {"table": "lake.db.a", "snapshot_id": 1}]}), 422, "invalid_request")
    assert_error(client.post(f"/leases/{lease_id}/renew", json={"ttl_seconds": value}), 422,
                 "invalid_request")
    assert_error(client.post("/versions", json={"tables": ["lake.db.a"], "lease_seconds": value}),
                 422, "invalid_request")
    assert len(client.get("/leases").json()["leases"]) == 1
    # Fractions of seconds stay allowed.
    assert client.post(f"/leases/{lease_id}/renew", json={"ttl_seconds": 0.5}).status_code == 200


@pytest.mark.parametrize("text", ["10.0", "1e1", "true"])
def test_integers_in_urls_are_digits(client: httpx.Client, text: str) -> None:
    _setup(client)
    for url in (f"/tables/lake/db/a/barriers?before={text}",
                f"/tables/lake/db/a/barriers?limit={text}",
                f"/jobs/etl/progress?before={text}",
                f"/lineage/lake/db/a?depth={text}",
                f"/lineage/lake/db/a/barriers/{text}",
                f"/leases?limit={text}",
                f"/rollback-plans?limit={text}"):
        assert_error(client.get(url), 422, "invalid_request")
    assert_error(client.post(f"/jobs/etl/barriers/{text}/abort"), 422, "invalid_request")
    assert client.get("/jobs/etl").json()["pinned_barrier"] == 10


def test_plain_integers_are_still_accepted(client: httpx.Client) -> None:
    _setup(client)
    assert client.get("/tables/lake/db/a/barriers?before=11&limit=5").status_code == 200
    assert client.get("/lineage/lake/db/a?depth=1").status_code == 200
    assert client.get("/lineage/lake/db/a/barriers/10").status_code == 200
    assert commit(client, "etl", "lake.db.b", 10, 5).status_code == 200
    assert root(client, "lake.db.a", -3, 20).status_code == 200  # snapshot ids are signed
