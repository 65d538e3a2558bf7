"""Malformed input to the core API is a 422 in the error shape of docs/contract.md#errors on both
backends, and nothing of it is stored: text PostgreSQL cannot store (a NUL) in a body field, a path
or a query."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.metaservice.barriers.test_barriers import root
from tests.metaservice.jobs.test_jobs import plan
from tests.metaservice.test_errors import assert_error

T = "lake.db.t"
NUL = "\u0000"


@dataclass(frozen=True)
class Case:
    name: str
    send: Callable[[httpx.Client, dict[str, Any]], httpx.Response]
    field: str


def _state(client: httpx.Client) -> dict[str, Any]:
    """What the cases could change: the leases and the job's position."""
    return {"leases": client.get("/leases").json(), "job": client.get("/jobs/etl").json()}


CASES = [
    Case("lease holder",
         lambda c, s: c.post("/leases", json={"holder": f"q{NUL}", "ttl_seconds": 60,
                                              "snapshots": [{"table": T, "snapshot_id": 1}]}),
         "holder"),
    Case("versions lease holder",
         lambda c, s: c.post("/versions", json={"tables": [T], "lease_seconds": 60,
                                                "holder": f"q{NUL}"}),
         "holder"),
    Case("abort reason",
         lambda c, s: c.post(f"/jobs/etl/barriers/{s['barrier']}/abort",
                             json={"reason": f"bad{NUL}row"}),
         "reason"),
    Case("lease holder in a query", lambda c, s: c.get("/leases", params={"holder": NUL}),
         "holder"),
    Case("lease id in a path", lambda c, s: c.get("/leases/%00"), "lease_id"),
    Case("lease id in a renewal path", lambda c, s: c.post("/leases/x%00/renew"), "lease_id"),
    Case("lease id in a release path", lambda c, s: c.delete("/leases/%00"), "lease_id"),
    Case("expiration id in a path", lambda c, s: c.get("/expirations/%00"), "expiration_id"),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_text_a_database_cannot_store_is_refused(client: httpx.Client, case: Case) -> None:
    assert root(client, T, 1, 100).status_code == 200
    plan(client, "etl", [T], ["lake.db.out"])
    started = client.post("/jobs/etl/start", json={"from": "latest"}).json()
    assert started["action"] == "process", started
    before = _state(client)

    error = assert_error(case.send(client, started), 422, "invalid_request")

    assert "NUL" in error["message"]
    assert error["details"]["problems"][0]["location"][-1] == case.field
    assert _state(client) == before
