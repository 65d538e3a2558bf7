"""Authentication and roles (docs/contract.md#tokens-and-roles): every route of the OpenAPI document
refuses a missing token (401) and a too-weak role (403) where it should; writers act only on their
own jobs."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import select, update

from benchmarks._environment import ServerThread
from metaservice.app import create_app
from metaservice.auth.policy import PUBLIC, Role, required_role
from metaservice.auth.service import create_token
from metaservice.clock import ManualClock
from metaservice.db.models import ApiTokenRow, JobRow, JobTableRow, TableRow
from metaservice.db.session import Database
from metaservice.settings import Settings
from tests.metaservice.test_errors import assert_error
from tests.metaservice.test_replicas import server_processes

# A read session's prefix is matched only when it can name a session (``session-…``).
SAMPLE_PARAMS = {"barrier": "10", "lease_id": "0123456789abcdef", "expiration_id": "1",
                 "plan_id": "1", "name": "someone", "prefix": "session-0123456789abcdef"}


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
    """The error's code: the code of docs/contract.md#errors, or the Iceberg error model's type on
    ``/iceberg`` routes (a HEAD answer has no body to read)."""
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


def _register_at_once(urls: tuple[str, str], tokens: tuple[str, str],
                      job: str, tables: tuple[str, str]) -> list[httpx.Response | None]:
    """Each token registers its table as a sink of ``job``, both released together."""
    gate = threading.Barrier(2)
    answers: list[httpx.Response | None] = [None, None]

    def register(k: int) -> None:
        with httpx.Client(base_url=urls[k], timeout=30) as http:
            http.get("/healthz")  # connected before the start
            gate.wait(timeout=30)
            answers[k] = http.post(f"/register/sink/{job}/lake/db/{tables[k]}",
                                   headers=auth(tokens[k]))

    threads = [threading.Thread(target=register, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return answers


def _race_new_job_registrations(urls: tuple[str, str], first: str, second: str,
                                database: Database, rounds: int) -> None:
    """Two writers register edges of the same new job at the same moment, ``rounds`` times:
    exactly one wins each round, the other is refused (403), and the job carries only the
    winner's edge (docs/contract.md#tokens-and-roles: a writer acts only on jobs it registered)."""
    names = ("t-writer", "t-writer2")
    for i in range(rounds):
        job = f"race{i}"
        answers = _register_at_once(urls, (first, second), job, (f"out{i}_0", f"out{i}_1"))
        codes = sorted(a.status_code for a in answers if a is not None)
        assert codes == [200, 403], (job, codes)
        winner = 0 if answers[0] is not None and answers[0].status_code == 200 else 1
        loser = answers[1 - winner]
        assert loser is not None and loser.json()["error"]["code"] == "forbidden"
        with database.engine.connect() as conn:
            owner = conn.scalar(select(JobRow.owner).where(JobRow.name == job))
            edges = conn.scalars(select(TableRow.name).join(
                JobTableRow, JobTableRow.table_id == TableRow.id).where(
                JobTableRow.job_name == job)).all()
        assert owner == names[winner], (job, owner)
        assert edges == [f"out{i}_{winner}"], (job, edges)


def test_two_writers_registering_one_new_job_at_once_one_wins(secured: tuple,
                                                              database: Database) -> None:
    _, http, tokens = secured
    url = str(http.base_url)
    _race_new_job_registrations((url, url), tokens[Role.writer], tokens["writer2"], database,
                                rounds=20)


@pytest.mark.slow  # two server processes
def test_two_writers_on_two_server_processes_registering_one_new_job(
        secured: tuple, database: Database, database_url: str) -> None:
    """The same race with each writer on its own server process sharing the database: the
    ownership check holds in the database transaction, not in a process."""
    _, _, tokens = secured
    with server_processes(database_url, env={"METASERVICE_AUTH": "required"}) as urls:
        _race_new_job_registrations((urls[0], urls[1]), tokens[Role.writer], tokens["writer2"],
                                    database, rounds=20)


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


def test_a_chunked_body_over_the_cap_answers_413(database: Database, database_url: str) -> None:
    """A body with no declared length (chunked) is counted as it arrives."""
    app = create_app(Settings(database_url=database_url, max_body_bytes=2048), database=database)

    def chunks() -> Iterator[bytes]:
        yield b'{"tables": ['
        for i in range(500):
            yield f'"lake.db.t{i}", '.encode()
        yield b'"lake.db.last"]}'

    with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
        response = http.post("/versions", content=chunks(),
                             headers={"content-type": "application/json"})
        assert response.request.headers.get("transfer-encoding") == "chunked"
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "payload_too_large"
        # A chunked body under the cap reaches the endpoint whole.
        small = http.post("/versions", content=iter([b'{"tables": ', b'["lake.db.none"]}']),
                          headers={"content-type": "application/json"})
        assert small.status_code == 404 and small.json()["error"]["code"] == "unknown_table", \
            small.text


def test_versions_request_size_is_capped(client: httpx.Client) -> None:
    response = client.post("/versions", json={"tables": [f"lake.db.t{i}" for i in range(1001)]})
    assert response.status_code == 422


# -- the last admin, and the bootstrap token's way back in ------------------------------------


def test_the_last_admin_token_cannot_be_revoked(secured: tuple) -> None:
    _, http, tokens = secured
    admin = auth(tokens[Role.admin])
    refused = http.delete("/admin/tokens/t-admin", headers=admin)
    error = assert_error(refused, 409, "last_admin")
    assert error["details"] == {"name": "t-admin"}
    assert "POST /admin/tokens" in error["message"]
    assert http.get("/admin/tokens", headers=admin).status_code == 200  # still an admin
    second = http.post("/admin/tokens", json={"name": "second", "role": "admin"},
                       headers=admin).json()["token"]
    assert http.delete("/admin/tokens/t-admin", headers=auth(second)).status_code == 200
    assert_error(http.delete("/admin/tokens/second", headers=auth(second)), 409, "last_admin")
    # Revoking a revoked admin token, or any other token, is not refused.
    assert http.delete("/admin/tokens/t-admin", headers=auth(second)).status_code == 200
    assert http.delete("/admin/tokens/t-reader", headers=auth(second)).status_code == 200


def test_two_admins_revoking_each_other_at_once_leave_one(secured: tuple,
                                                          database: Database) -> None:
    """Each round, the only two admins revoke each other at the same moment: one wins, the
    other is refused (409 last_admin, or 401 once its own token is revoked), and one admin
    token stays active."""
    _, http, tokens = secured
    survivor = ("t-admin", tokens[Role.admin])
    for i in range(10):
        name = f"admin{i}"
        created = http.post("/admin/tokens", json={"name": name, "role": "admin"},
                            headers=auth(survivor[1]))
        assert created.status_code == 201, created.text
        pair = [survivor, (name, created.json()["token"])]
        gate = threading.Barrier(2)
        answers: list[httpx.Response | None] = [None, None]

        def revoke(k: int, pair: list[tuple[str, str]] = pair, gate: threading.Barrier = gate,
                   answers: list[httpx.Response | None] = answers) -> None:
            with httpx.Client(base_url=str(http.base_url), timeout=30) as own:
                own.get("/healthz")  # connected before the start
                gate.wait(timeout=30)
                answers[k] = own.delete(f"/admin/tokens/{pair[1 - k][0]}",
                                        headers=auth(pair[k][1]))

        threads = [threading.Thread(target=revoke, args=(k,)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        codes = [a.status_code if a is not None else None for a in answers]
        assert sorted(codes) in ([200, 401], [200, 409]), (i, [a and a.text for a in answers])
        with database.engine.connect() as connection:
            active = connection.scalars(select(ApiTokenRow.name).where(
                ApiTokenRow.role == "admin", ApiTokenRow.revoked_at.is_(None))).all()
        winner = codes.index(200)
        assert active == [pair[winner][0]], (i, active)
        survivor = pair[winner]


def _restart(database: Database, database_url: str, clock: ManualClock,
             admin_token: str) -> object:
    """A server start with ``METASERVICE_ADMIN_TOKEN`` set (the app's creation does what a
    start does with it)."""
    return create_app(Settings(database_url=database_url, auth="required",
                               admin_token=SecretStr(admin_token)), clock=clock,
                      database=database)


def test_a_restart_with_the_bootstrap_token_restores_an_admin_when_none_is_active(
        database: Database, database_url: str, clock: ManualClock) -> None:
    """The way back in when no admin token is active (revoked before revocations of the last
    admin were refused, or lost): restart with METASERVICE_ADMIN_TOKEN set."""
    secret = "mst_bootstrap-secret"
    _restart(database, database_url, clock, secret)
    with database.engine.begin() as connection:  # every admin revoked, as a fuzzer once did
        connection.execute(update(ApiTokenRow).values(revoked_at=1))
    app = _restart(database, database_url, clock, secret)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        listed = http.get("/admin/tokens", headers=auth(secret))
        assert listed.status_code == 200, listed.text
        (bootstrap,) = [t for t in listed.json()["tokens"] if t["name"] == "bootstrap-admin"]
        assert bootstrap["role"] == "admin" and bootstrap["revoked_at"] is None


def test_a_bootstrap_token_revoked_while_another_admin_is_active_stays_revoked(
        database: Database, database_url: str, clock: ManualClock) -> None:
    secret = "mst_bootstrap-secret"
    _restart(database, database_url, clock, secret)
    with database.transaction(write=True) as session:
        other = create_token(session, "ops", Role.admin, clock.now_ms()).token
    app = _restart(database, database_url, clock, secret)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.delete("/admin/tokens/bootstrap-admin",
                           headers=auth(other)).status_code == 200
    app = _restart(database, database_url, clock, secret)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.get("/admin/tokens", headers=auth(secret)).status_code == 401
        assert http.get("/admin/tokens", headers=auth(other)).status_code == 200
