"""The lean routes (``metaservice/lean_routes.py``) answer every request exactly as FastAPI's own
routing and dependency solving do: the same scenario of good and bad requests, with tokens of
every role, is run against an app with them and one without, each on a freshly wiped database
with the same manual clock, and the answers are compared byte for byte (random ids, file names
and wall-clock stamps named in order of appearance)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, Cookie, Depends, FastAPI, Query, Response
from starlette.routing import Mount

from benchmarks._environment import ServerThread
from metaservice import lean_routes
from metaservice.app import LEAN_OPERATIONS, create_app
from metaservice.auth.dependencies import authorize
from metaservice.auth.policy import Role
from metaservice.auth.service import create_token
from metaservice.clock import ManualClock
from metaservice.db.session import Database
from metaservice.deps import ReadSession, refuse_unstorable_input
from metaservice.settings import Settings
from tests.conftest import wipe

JSON = {"Content-Type": "application/json"}
ROLES = ("admin", "writer", "writer2", "reader", "none")

# (method, path, who, body: bytes | a JSON document | None, extra headers)
Request = tuple[str, str, str, Any, dict[str, str]]


def _bytes(body: Any) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def _deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def protocol_requests() -> Iterator[Request]:
    """Root reports, ``next``, sink commits and ``POST /versions``, well and badly formed."""
    report = "/tables/lake/db/a/barriers"
    yield "POST", report, "writer", {"snapshot_id": 1, "barrier": 10}, JSON
    for who in ("none", "reader"):
        yield "POST", report, who, {"snapshot_id": 2, "barrier": 11}, JSON
    for body in (b"{", b"", {"snapshot_id": "x"}, {"snapshot_id": -1}, {"barrier": 12},
                 [], {"snapshot_id": 3, "x": "nul \u0000"}, {"snapshot_id": 1, "barrier": 10},
                 {"snapshot_id": 2, "barrier": 5}, {"snapshot_id": 4, "barrier": 2 ** 70},
                 {"snapshot_id": 4, "barrier": 20, "extra": True}, _deep(100_000),
                 b"\xff\xfe{}", b'{"snapshot_id": 5, "snapshot_id": 6}'):
        yield "POST", report, "writer", body, JSON
    yield "POST", report, "writer", b'{"snapshot_id": 7}', {"Content-Type": "text/plain"}
    yield "POST", report, "writer", b'{"snapshot_id": 7}', {}
    yield "POST", report, "writer", {"snapshot_id": 7}, {"Content-Type": "application/x+json"}
    yield "POST", "/tables/lake/d%20b/a/barriers", "writer", {"snapshot_id": 1}, JSON
    yield "POST", "/tables/lake/db/a/barriers?x=1", "writer", {"snapshot_id": 8}, JSON
    yield "GET", report, "reader", None, {}
    yield "HEAD", report, "reader", None, {}
    yield "PUT", report, "writer", {"snapshot_id": 9}, JSON
    yield "POST", report + "/", "writer", {"snapshot_id": 9}, JSON
    yield "POST", "/tables/lake/db/c/barriers", "writer", {"snapshot_id": 1, "barrier": 10}, JSON

    for kind, table in (("source", "a"), ("source", "c"), ("sink", "b")):
        yield "POST", f"/register/{kind}/etl/lake/db/{table}", "writer", None, {}
    yield "POST", "/jobs/etl/start", "writer", None, {}
    nxt = "/jobs/etl/barriers/next"
    for who in ("none", "reader", "writer2"):
        yield "POST", nxt, who, {}, JSON
    for body in (b"{", {"after": "x"}, {"after": -1}, [], {"after": None}):
        yield "POST", nxt, "writer", body, JSON
    yield "POST", "/jobs/bad%20job/barriers/next", "writer", {}, JSON
    yield "POST", "/jobs/nobody/barriers/next", "admin", {}, JSON
    yield "POST", nxt, "writer", b"", {}
    yield "POST", nxt, "writer", {}, JSON

    commit = "/commit/etl/lake/db/b"
    for who in ("none", "reader", "writer2"):
        yield "POST", commit, who, {"barrier": 10, "snapshot_id": 5}, JSON
    for body in ({"barrier": 11, "snapshot_id": 5}, {"snapshot_id": 5}, {"barrier": "x"}, b"{",
                 {"barrier": 10, "snapshot_id": 5}, {"barrier": 10, "snapshot_id": 5},
                 {"barrier": 10, "snapshot_id": 6}):
        yield "POST", commit, "writer", body, JSON
    yield "POST", "/commit/etl/lake/db/a", "writer", {"barrier": 10, "snapshot_id": 5}, JSON
    yield "POST", "/commit/etl/lake/d%00b/b", "writer", {"barrier": 10, "snapshot_id": 5}, JSON
    yield "POST", nxt, "writer", {}, JSON

    versions = "/versions"
    for body in ({"tables": ["lake.db.a", "lake.db.b", "lake.db.c"]},
                 {"tables": ["lake.db.a"], "consistency": "weak"},
                 {"tables": ["lake.db.a", "lake.db.b"], "barrier": 10},
                 {"tables": ["lake.db.a", "lake.db.b"], "barrier": 9},
                 {"tables": ["lake.db.nothing"]}, {"tables": []}, {"tables": ["bad name"]},
                 {"tables": "lake.db.a"}, {"tables": ["lake.db.a"], "consistency": "eventual"},
                 {"tables": ["lake.db.a"], "lease_seconds": 60, "holder": "me"},
                 {"tables": ["lake.db.a"], "lease_seconds": -1}, b"{", b""):
        yield "POST", versions, "reader", body, JSON
    for who in ("none", "writer", "admin"):
        yield "POST", versions, who, {"tables": ["lake.db.b"]}, JSON
    yield "GET", versions, "reader", None, {}


SCHEMA = {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False}]}


def catalog_requests() -> Iterator[Request]:
    """The catalog's loads (head and read session) and commits, well and badly formed."""
    yield "POST", "/iceberg/v1/namespaces", "admin", {"namespace": ["db"]}, JSON
    yield "POST", "/iceberg/v1/namespaces/db/tables", "admin", {"name": "t", "schema": SCHEMA}, JSON
    table = "/iceberg/v1/namespaces/db/tables/t"
    for who in ("none", "reader", "writer"):
        yield "GET", table, who, None, {}
    for query in ("?snapshots=refs", "?snapshots=all", "?snapshots=some", "?snapshots=",
                  "?other=1"):
        yield "GET", table + query, "reader", None, {}
    yield "GET", table, "reader", None, {"If-None-Match": "*"}
    yield "GET", table, "reader", None, {"If-None-Match": '"nothing"'}
    yield "GET", table, "reader", None, {"If-None-Match": "x" * 3000}
    for path in ("/iceberg/v1/namespaces/db/tables/nothing", "/iceberg/v1/namespaces/no/tables/t",
                 "/iceberg/v1/namespaces/d%00b/tables/t", "/iceberg/v1/namespaces/db/tables/t%00"):
        yield "GET", path, "reader", None, {}
    for who in ("none", "reader"):
        yield "POST", table, who, {"requirements": [], "updates": []}, JSON
    for body in ({"requirements": [], "updates": [{"action": "set-properties",
                                                   "updates": {"k": "v"}}]},
                 {"requirements": [{"type": "assert-table-uuid",
                                    "uuid": "00000000-0000-0000-0000-000000000000"}],
                  "updates": []},
                 {"requirements": [], "updates": "x"}, {"updates": [{"action": "nothing"}]},
                 b"{", b"", [], {"requirements": [], "updates": [
                     {"action": "set-properties", "updates": {"k": "nul \u0000"}}]}):
        yield "POST", table, "admin", body, JSON
    idempotent = {**JSON, "Idempotency-Key": "0190f3a0-0000-7000-8000-000000000001"}
    change = {"requirements": [], "updates": [{"action": "set-properties",
                                               "updates": {"k": "w"}}]}
    yield "POST", table, "admin", change, idempotent
    yield "POST", table, "admin", change, idempotent
    yield "POST", "/iceberg/v1/namespaces/db/tables/nothing", "admin", change, JSON
    yield "GET", table, "reader", None, {}
    yield "GET", "/iceberg/v1/config?warehouse=lake@strong", "reader", None, {}
    session = "/iceberg/v1/{prefix}/namespaces/db/tables/t"
    for who in ("reader", "writer", "none"):
        yield "GET", session, who, None, {}
    yield "GET", session + "?snapshots=refs", "reader", None, {}
    yield "GET", session + "?snapshots=bad", "reader", None, {}
    yield "GET", "/iceberg/v1/{prefix}/namespaces/db/tables/nothing", "reader", None, {}
    yield "GET", "/iceberg/v1/session-nothing/namespaces/db/tables/t", "reader", None, {}
    yield "POST", session, "admin", change, JSON


_IDS = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{16,}")
_STAMPS = re.compile(r'("(?:last-updated-ms|timestamp-ms|expires_at)": ?)\d+')


def _normalised(text: str, names: dict[str, str]) -> str:
    """Random ids and file names replaced by their order of first appearance in the run, and
    wall-clock stamps by a mark."""
    text = _STAMPS.sub(r"\1<ms>", text)
    return _IDS.sub(lambda m: names.setdefault(m.group(), f"<id{len(names)}>"), text)


def run(app: Any, requests: Callable[[], Iterator[Request]],
        tokens: dict[str, str]) -> list[tuple[str, int, str, str]]:
    answers: list[tuple[str, int, str, str]] = []
    names: dict[str, str] = {}
    prefix = ""
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        for method, template, who, body, headers in requests():
            path = template.replace("{prefix}", prefix)
            sent = dict(headers)
            if who != "none":
                sent["Authorization"] = f"Bearer {tokens[who]}"
            response = http.request(method, path, headers=sent,
                                    content=None if body is None else _bytes(body))
            if path.startswith("/iceberg/v1/config") and response.status_code == 200:
                prefix = response.json()["overrides"]["prefix"]
            answers.append((f"{method} {template} as {who}", response.status_code,
                            _normalised(response.headers.get("content-type", ""), names),
                            _normalised(response.headers.get("etag", "") + " "
                                        + response.text, names)))
    return answers


@pytest.mark.parametrize("requests", [protocol_requests, catalog_requests],
                         ids=["protocol", "catalog"])
def test_lean_routes_answer_every_request_as_fastapi_does(
        database: Database, database_url: str, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Any, requests: Callable[[], Iterator[Request]]) -> None:
    taken: list[str] = []
    respond = lean_routes.LeanRoute.respond

    async def counted(self: lean_routes.LeanRoute, scope: Any, receive: Any, send: Any) -> None:
        taken.append(self.route.operation_id or "")
        await respond(self, scope, receive, send)

    monkeypatch.setattr(lean_routes.LeanRoute, "respond", counted)
    answers = {}
    for lean in (True, False):
        wipe(database)
        clock = ManualClock()
        warehouse = tmp_path / "warehouse"  # the same path both times: it is in the answers
        shutil.rmtree(warehouse, ignore_errors=True)
        warehouse.mkdir()
        app = create_app(Settings(database_url=database_url, auth="required", lean_routes=lean,
                                  warehouse=str(warehouse)),
                         clock=clock, database=database)
        tokens = {}
        with database.transaction(write=True) as session:
            for name, role in (("admin", Role.admin), ("writer", Role.writer),
                               ("writer2", Role.writer), ("reader", Role.reader)):
                tokens[name] = create_token(session, f"t-{name}", role, clock.now_ms()).token
        before = len(taken)
        answers[lean] = run(app, requests, tokens)
        if not lean:
            assert len(taken) == before, "an app without lean routes took a lean route"
    assert taken and set(taken) <= set(LEAN_OPERATIONS)
    for with_lean, without in zip(answers[True], answers[False], strict=True):
        assert with_lean == without
    statuses = {status for _, status, _, _ in answers[True]}
    assert {200, 401, 403, 422 if requests is protocol_requests else 400} <= statuses


def _app_with(*routes: Callable[[APIRouter], None], include: Callable[..., None] | None = None,
              router: APIRouter | None = None) -> FastAPI:
    app = FastAPI(dependencies=[Depends(refuse_unstorable_input), Depends(authorize)])
    router = router or APIRouter()
    for add in routes:
        add(router)
    (include or app.include_router)(router)
    return app


def _session_dependency(router: APIRouter) -> None:
    @router.post("/a/{x}", operation_id="op")
    def op(x: str, session: ReadSession) -> Response:
        return Response()


def _model_answer(router: APIRouter) -> None:
    @router.post("/a/{x}", operation_id="op")
    def op(x: str) -> dict:
        return {}


def _mutable_default(router: APIRouter) -> None:
    @router.get("/a/{x}", operation_id="op")
    def op(x: str, tags: Annotated[list[str], Query()] = []) -> Response:  # noqa: B006
        return Response()


def _default_as_marker(router: APIRouter) -> None:
    @router.get("/a/{x}", operation_id="op")
    def op(x: str, q: str = Query("all", pattern="^all$")) -> Response:  # noqa: B008
        return Response()


def _many_values(router: APIRouter) -> None:
    @router.get("/a/{x}", operation_id="op")
    def op(x: str, q: Annotated[list[str] | None, Query()] = None) -> Response:
        return Response()


def _unmarked_non_model_body(router: APIRouter) -> None:
    @router.post("/a/{x}", operation_id="op")
    def op(x: str, body: dict[str, Any]) -> Response:
        return Response()


def _cookie(router: APIRouter) -> None:
    @router.post("/a/{x}", operation_id="op")
    def op(x: str, session: Annotated[str | None, Cookie()] = None) -> Response:
        return Response()


def _uncached_principal(router: APIRouter) -> None:
    @router.post("/a/{x}", operation_id="op")
    def op(x: str, who: Annotated[Any, Depends(authorize, use_cache=False)]) -> Response:
        return Response()


def _shadowed(earlier_path: str, lean_path: str) -> Callable[[APIRouter], None]:
    """A route at ``earlier_path`` (its parameter: ``x``) declared before the lean operation at
    ``lean_path``."""
    def declare(router: APIRouter) -> None:
        @router.post(earlier_path, operation_id="earlier")
        def earlier(x: str) -> Response:
            return Response()

        @router.post(lean_path, operation_id="op")
        def op() -> Response:
            return Response()
    return declare


def _two_methods(router: APIRouter) -> None:
    @router.api_route("/a/{x}", methods=["GET", "POST"], operation_id="op")
    def op(x: str) -> Response:
        return Response()


def _simple(router: APIRouter) -> None:
    @router.post("/a/{x}", operation_id="op")
    def op(x: str) -> Response:
        return Response()


async def _deny() -> None:
    raise AssertionError("never reached: the app is refused first")


def _mounted_before(app: FastAPI) -> FastAPI:
    app.router.routes.insert(0, Mount("/a", app=Response()))
    return app


@pytest.mark.parametrize(("app", "reason"), [
    (lambda: _app_with(_session_dependency), "depends on"),
    (lambda: _app_with(_model_answer), "return a Response"),
    (lambda: _app_with(_mutable_default), "not immutable"),
    (lambda: _app_with(_default_as_marker), "declared by its default"),
    (lambda: _app_with(_many_values), "one scalar value"),
    (lambda: _app_with(_unmarked_non_model_body), "one scalar value"),
    (lambda: _app_with(_cookie), "cookie"),
    (lambda: _app_with(_uncached_principal), "without its cache"),
    (lambda: _app_with(_simple, router=APIRouter(strict_content_type=False)),
     "content-type rule"),
    (lambda: _app_with(_shadowed("/a/{x}", "/a/b")), "may take the same requests"),
    (lambda: _app_with(_shadowed("/v{x}/items", "/v1/items")), "may take the same requests"),
    (lambda: _mounted_before(_app_with(_simple)), "may take the same requests"),
    (lambda: _app_with(_two_methods), "one method expected"),
    (lambda: _app_with(_simple, router=APIRouter(dependencies=[Depends(_deny)])),
     "dependencies"),
    (lambda: (app := FastAPI(dependencies=[Depends(refuse_unstorable_input),
                                           Depends(authorize)]),
              router := APIRouter(), _simple(router),
              app.include_router(router, dependencies=[Depends(_deny)]))[0],
     "dependencies of its own"),
    (lambda: (app := FastAPI(dependencies=[Depends(refuse_unstorable_input),
                                           Depends(authorize)]),
              router := APIRouter(), _simple(router), app.include_router(router, prefix="/p"))[0],
     "prefix"),
])
def test_an_endpoint_that_cannot_be_bound_as_fastapi_binds_it_is_refused_at_start(
        app: Callable[[], FastAPI], reason: str) -> None:
    with pytest.raises(lean_routes.NotLean, match=reason):
        lean_routes.install(app(), ["op"])


def test_an_app_with_other_global_dependencies_is_refused_at_start() -> None:
    async def another() -> None:
        return None

    app = _app_with(_simple)
    app.router.dependencies.append(Depends(another))
    with pytest.raises(lean_routes.NotLean, match="dependencies"):
        lean_routes.install(app, ["op"])


async def _asgi(app: Any, messages: list[dict[str, Any]], path: str, *,
                root_path: str = "") -> tuple[int, bytes]:
    """One request straight to the app, its body as the given receive messages."""
    queue = list(messages)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
               "method": "POST" if messages else "GET", "scheme": "http",
               "path": root_path + path, "raw_path": (root_path + path).encode(),
               "root_path": root_path, "query_string": b"",
               "headers": [(b"host", b"x"), (b"content-type", b"application/json")],
               "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {}},
              receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize(("path", "messages"), [
    # the client goes away in the middle of its body
    ("/versions", [{"type": "http.request", "body": b'{"tables"', "more_body": True},
                   {"type": "http.disconnect"}]),
    ("/iceberg/v1/namespaces/db/tables/t",
     [{"type": "http.request", "body": b'{"upd', "more_body": True}, {"type": "http.disconnect"}]),
    # a body over the limit with no declared length (as an HTTP/2 server hands it over)
    ("/versions", [{"type": "http.request", "body": b" " * 3000, "more_body": False}]),
])
def test_a_body_that_cannot_be_read_is_answered_as_fastapi_answers_it(
        database: Database, database_url: str, path: str,
        messages: list[dict[str, Any]]) -> None:
    answers = {
        lean: asyncio.run(_asgi(create_app(Settings(database_url=database_url, lean_routes=lean,
                                                    max_body_bytes=1024), database=database),
                                messages, path))
        for lean in (True, False)}
    assert answers[True] == answers[False]
    assert answers[True][0] in (400, 413)


def test_catalog_errors_keep_their_model_behind_a_proxy_path(database: Database,
                                                             database_url: str) -> None:
    for lean in (True, False):
        app = create_app(Settings(database_url=database_url, lean_routes=lean),
                         database=database)
        status, body = asyncio.run(_asgi(app, [], "/iceberg/v1/namespaces/db/tables/nothing",
                                         root_path="/behind/a/proxy"))
        assert status == 404, body
        assert json.loads(body)["error"]["type"] == "NoSuchTableException"


def test_the_app_still_names_the_paths_of_its_routes(database: Database,
                                                     database_url: str) -> None:
    app = create_app(Settings(database_url=database_url), database=database)
    assert isinstance(app.router.routes[0], lean_routes.LeanRoutes)
    assert app.url_path_for("get_versions") == "/versions"
    assert app.url_path_for("next_barrier", job="j") == "/jobs/j/barriers/next"
