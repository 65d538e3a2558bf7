"""Authentication and roles (SPEC §9): every route of the OpenAPI document refuses a missing
token (401) and a too-weak role (403) where it should; writers act only on their own jobs."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from metaservice.app import create_app
from metaservice.auth.policy import PUBLIC, Role, required_role
from metaservice.auth.service import create_token
from metaservice.clock import ManualClock
from metaservice.db.session import Database
from metaservice.settings import Settings
from tests.conftest import ServerThread

SAMPLE_PARAMS = {"barrier": "10", "lease_id": "0123456789abcdef", "expiration_id": "1",
                 "plan_id": "1", "name": "someone"}


def concrete(path: str) -> str:
    return re.sub(r"\{([^}:]+)(:[^}]*)?\}",
                  lambda m: SAMPLE_PARAMS.get(m.group(1), "x" + m.group(1)), path)


@pytest.fixture
def secured(database: Database, database_url: str, clock: ManualClock) -> Iterator[tuple]:
    settings = Settings(database_url=database_url, auth="required")
    app = create_app(settings, clock=clock, database=database)
    tokens = {}
    with database.transaction(write=True) as session:
        for role in Role:
            tokens[role] = create_token(session, f"t-{role.name}", role, clock.now_ms()).token
        tokens["writer2"] = create_token(session, "t-writer2", Role.writer, clock.now_ms()).token
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        yield app, http, tokens


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def refusal(method: str, response: httpx.Response) -> str:
    """The error's code: SPEC §9's, or the Iceberg error model's type on ``/iceberg`` routes (a
    HEAD answer has no body to read)."""
    if method == "HEAD":
        return {401: "unauthorized", 403: "forbidden"}[response.status_code]
    error = response.json()["error"]
    return error["type"] if isinstance(error["code"], int) else error["code"]


def test_every_route_refuses_missing_tokens_and_weak_roles(secured: tuple) -> None:
    app, http, tokens = secured
    paths = app.openapi()["paths"]
    checked = 0
    for path, operations in paths.items():
        for method in operations:
            method = method.upper()
            needed = required_role(method, path)
            url = concrete(path)
            anonymous = http.request(method, url, json={})
            if needed == PUBLIC:
                assert anonymous.status_code not in (401, 403), (method, path)
                continue
            assert anonymous.status_code == 401, (method, path, anonymous.text)
            assert refusal(method, anonymous) in ("unauthorized", "NotAuthorizedException")
            bogus = http.request(method, url, json={}, headers=auth("mst_not-a-real-token"))
            assert bogus.status_code == 401, (method, path)
            for role in Role:
                response = http.request(method, url, json={}, headers=auth(tokens[role]))
                if role < needed:
                    assert response.status_code == 403, (method, path, role, response.text)
                    assert refusal(method, response) in ("forbidden", "ForbiddenException")
                else:
                    assert response.status_code not in (401, 403), (method, path, role,
                                                                     response.text)
            checked += 1
    assert checked >= 15


def test_no_mutating_route_is_public(secured: tuple) -> None:
    app, _, _ = secured
    for path, operations in app.openapi()["paths"].items():
        for method in operations:
            if method.upper() not in ("GET", "HEAD"):
                assert required_role(method.upper(), path) != PUBLIC, (method, path)


def test_writer_acts_only_on_jobs_it_registered(secured: tuple) -> None:
    _, http, tokens = secured
    own = auth(tokens[Role.writer])
    other = auth(tokens["writer2"])
    assert http.post("/register/source/etl/lake/db/a", headers=own).status_code == 200
    assert http.post("/register/sink/etl/lake/db/b", headers=own).status_code == 200
    refused = http.post("/jobs/etl/start", headers=other)
    assert refused.status_code == 403 and refused.json()["error"]["details"]["job"] == "etl"
    assert http.post("/register/sink/etl/lake/db/c", headers=other).status_code == 403
    assert http.post("/jobs/etl/start", headers=own).status_code == 200
    assert http.post("/unregister/etl", headers=auth(tokens[Role.admin])).status_code == 200


def test_tokens_are_created_listed_and_revoked_through_the_admin_api(secured: tuple) -> None:
    _, http, tokens = secured
    admin = auth(tokens[Role.admin])
    created = http.post("/admin/tokens", json={"name": "olap", "role": "reader"}, headers=admin)
    assert created.status_code == 201
    value = created.json()["token"]
    assert http.get("/jobs", headers=auth(value)).status_code == 200
    listed = http.get("/admin/tokens", headers=admin).json()["tokens"]
    assert "olap" in [t["name"] for t in listed]
    assert all("token" not in t and "hash" not in str(t) for t in listed)
    assert http.delete("/admin/tokens/olap", headers=admin).json()["revoked_at"] is not None
    assert http.get("/jobs", headers=auth(value)).status_code == 401


def test_tokens_are_stored_hashed(secured: tuple, database: Database) -> None:
    _, _, tokens = secured
    from sqlalchemy import text

    with database.engine.connect() as conn:
        stored = " ".join(str(v) for row in conn.execute(text("SELECT * FROM api_tokens"))
                          for v in row)
    for token in tokens.values():
        assert token not in stored


def test_rate_limit_answers_429(database: Database, database_url: str) -> None:
    settings = Settings(database_url=database_url, rate_limit_per_second=0.001,
                        rate_limit_burst=3)
    app = create_app(settings, database=database)
    with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
        codes = [http.get("/jobs").status_code for _ in range(5)]
        assert codes[:3] == [200, 200, 200] and codes[3] == 429
        limited = http.get("/jobs")
        assert limited.json()["error"]["code"] == "rate_limited"
        assert int(limited.headers["Retry-After"]) >= 1
        assert http.get("/healthz").status_code == 200  # probes are never limited


def test_request_body_cap_answers_413(database: Database, database_url: str) -> None:
    app = create_app(Settings(database_url=database_url, max_body_bytes=2048), database=database)
    with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
        big = {"tables": [f"lake.db.t{i}" for i in range(500)]}
        response = http.post("/versions", json=big)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "payload_too_large"


def test_versions_request_size_is_capped(client: httpx.Client) -> None:
    response = client.post("/versions", json={"tables": [f"lake.db.t{i}" for i in range(1001)]})
    assert response.status_code == 422
