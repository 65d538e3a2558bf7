"""Transport-level behaviour of the client: retries, timeouts, error mapping, the token.

These use ``httpx.MockTransport`` because they are about what happens on the wire when it fails;
the client's behaviour against the real server is covered by the end-to-end tests.
"""

from __future__ import annotations

import socket

import httpx
import pytest

import spark_plugin as sp


def error(status: int, code: str, message: str = "m", **details: object) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message,
                                                  "details": details}})


def make_client(handler, **kwargs) -> sp.MetaServiceClient:
    kwargs.setdefault("backoff_seconds", 0.0)
    return sp.MetaServiceClient("http://ms.test", transport=httpx.MockTransport(handler),
                                sleep=lambda _: None, **kwargs)


@pytest.mark.parametrize(("status", "code", "cls"), [
    (422, "invalid_request", sp.InvalidRequestError),
    (404, "unknown_job", sp.UnknownJobError),
    (404, "unknown_table", sp.UnknownTableError),
    (404, "no_version", sp.NoVersionError),
    (404, "catching_up", sp.CatchingUpError),
    (404, "unknown_lease", sp.UnknownLeaseError),
    (404, "not_found", sp.NotFoundError),
    (409, "table_has_writer", sp.TableHasWriterError),
    (409, "cycle", sp.CycleError),
    (409, "barrier_regression", sp.BarrierRegressionError),
    (409, "unknown_barrier", sp.UnknownBarrierError),
    (409, "not_a_sink", sp.NotASinkError),
    (409, "job_not_running", sp.JobNotRunningError),
    (409, "job_not_planned", sp.JobNotPlannedError),
    (409, "barrier_not_complete", sp.BarrierNotCompleteError),
    (409, "barrier_not_exact", sp.BarrierNotExactError),
    (409, "barrier_rolled_back", sp.BarrierRolledBackError),
    (409, "rollback_plan_outdated", sp.RollbackPlanOutdatedError),
    (410, "snapshot_expired", sp.SnapshotExpiredError),
    (410, "lease_expired", sp.LeaseExpiredError),
    (422, "barrier_in_future", sp.BarrierInFutureError),
    (401, "unauthorized", sp.AuthenticationError),
    (403, "forbidden", sp.PermissionDeniedError),
    (413, "payload_too_large", sp.PayloadTooLargeError),
    (500, "internal_error", sp.InternalServerError),
])
def test_each_error_code_raises_its_class(status: int, code: str, cls: type) -> None:
    client = make_client(lambda req: error(status, code, "boom", tables=["a.b.c"]))
    with pytest.raises(cls) as info:
        client.get_job("j")
    assert isinstance(info.value, sp.APIError)
    assert isinstance(info.value, sp.MetaServiceError)
    assert (info.value.status_code, info.value.code, info.value.message) == (status, code, "boom")
    assert info.value.details == {"tables": ["a.b.c"]}


def test_unknown_code_falls_back_to_the_class_of_its_status() -> None:
    client = make_client(lambda req: error(409, "brand_new_conflict"))
    with pytest.raises(sp.ConflictError) as info:
        client.get_job("j")
    assert type(info.value) is sp.ConflictError
    assert info.value.code == "brand_new_conflict"


def test_cycle_and_barrier_not_complete_expose_their_details() -> None:
    client = make_client(lambda req: error(409, "cycle", path=["a.b.t", "j", "a.b.t"]))
    with pytest.raises(sp.CycleError) as cycle:
        client.register_sink("j", "a.b.t")
    assert cycle.value.path == ["a.b.t", "j", "a.b.t"]
    client = make_client(lambda req: error(409, "barrier_not_complete", tables=["a.b.t2"]))
    with pytest.raises(sp.BarrierNotCompleteError) as behind:
        client.get_versions(["a.b.t1", "a.b.t2"], barrier=30)
    assert behind.value.tables == ["a.b.t2"]


def test_barrier_not_exact_exposes_the_tables_and_their_nearest_exact_barriers() -> None:
    nearest = {"a.b.t2": {"below": 20, "above": None}}
    client = make_client(lambda req: error(409, "barrier_not_exact", barrier=30,
                                           tables=["a.b.t2"], nearest=nearest))
    with pytest.raises(sp.BarrierNotExactError) as inexact:
        client.get_versions(["a.b.t1", "a.b.t2"], barrier=30)
    assert (inexact.value.tables, inexact.value.nearest) == (["a.b.t2"], nearest)


def test_non_json_error_body_is_mapped_by_status() -> None:
    client = make_client(lambda req: httpx.Response(502, text="<html>bad gateway</html>"))
    with pytest.raises(sp.APIError) as info:
        client.healthz()
    assert info.value.status_code == 502
    assert "bad gateway" in info.value.message


def test_connection_errors_are_retried_for_any_call_then_succeed() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) < 3:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"lease_id": "L1", "expires_at": 5})

    lease = make_client(handler).create_lease("h", 60, {"a.b.c": 1})
    assert lease.lease_id == "L1"
    assert len(calls) == 3


def test_connection_errors_give_up_after_max_retries() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(sp.TransportError) as info:
        make_client(handler, max_retries=2).healthz()
    assert len(calls) == 3
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_no_server_says_where_it_looked_and_how_to_start_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A real connection refused: the message names the URL it tried, `metaservice serve` and
    METASERVICE_URL, not only the route."""
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("METASERVICE_URL", url)
    with sp.MetaServiceClient(max_retries=0) as client, pytest.raises(sp.TransportError) as info:
        client.get_version("lake.db.orders", "strong")
    message = str(info.value)
    assert message.startswith(f"GET {url}/version/strong/lake/db/orders: ConnectError")
    assert f"no MetaService server answers at {url} ($METASERVICE_URL)" in message
    assert "`metaservice serve`" in message and "set METASERVICE_URL" in message


def test_read_timeout_is_retried_only_for_idempotent_calls() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        raise httpx.ReadTimeout("slow", request=request)

    client = make_client(handler, max_retries=2)
    with pytest.raises(sp.TransportError):
        client.next_barrier("j", 10)  # pinned on the server: safe to repeat
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(sp.TransportError) as info:
        client.report_root_barrier("a.b.c", 5)  # no barrier: the server assigns one
    assert len(calls) == 1
    assert "not idempotent" in str(info.value)


def test_rate_limited_and_database_unavailable_are_retried_honouring_retry_after() -> None:
    answers = [httpx.Response(429, headers={"Retry-After": "2"},
                              json={"error": {"code": "rate_limited", "message": "slow down"}}),
               error(503, "database_unavailable"),
               httpx.Response(200, json={"table": "a.b.c", "barrier": 7, "snapshot_id": 9})]
    slept: list[float] = []
    client = sp.MetaServiceClient("http://ms.test", backoff_seconds=0.01, max_backoff_seconds=5,
                                  transport=httpx.MockTransport(lambda req: answers.pop(0)),
                                  sleep=slept.append)
    commit = client.report_root_barrier("a.b.c", 9)
    assert commit == sp.Commit("a.b.c", 7, 9)
    assert len(slept) == 2 and slept[0] >= 2.0


def test_rollback_in_progress_is_repeated_for_any_call_after_retry_after_ms() -> None:
    """A fenced table refuses the call without acting on it: repeating is safe even when the
    call itself is not idempotent (a root report whose barrier the server assigns)."""
    answers = [error(409, "rollback_in_progress", table="a.b.c", plan=4, retry_after_ms=1500),
               httpx.Response(200, json={"table": "a.b.c", "barrier": 7, "snapshot_id": 9})]
    slept: list[float] = []
    client = sp.MetaServiceClient("http://ms.test", backoff_seconds=0.01, max_backoff_seconds=5,
                                  transport=httpx.MockTransport(lambda req: answers.pop(0)),
                                  sleep=slept.append)
    assert client.report_root_barrier("a.b.c", 9) == sp.Commit("a.b.c", 7, 9)
    assert len(slept) == 1 and slept[0] >= 1.5


def test_rollback_in_progress_is_raised_once_the_retries_are_spent() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return error(409, "rollback_in_progress", retry_after_ms=10)

    with pytest.raises(sp.RollbackInProgressError) as info:
        make_client(handler, max_retries=2).commit("j", "a.b.c", 1, 5)
    assert len(calls) == 3
    assert isinstance(info.value, sp.ConflictError)


def test_conflicts_are_not_retried() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return error(409, "barrier_regression")

    with pytest.raises(sp.BarrierRegressionError):
        make_client(handler).commit("j", "a.b.c", 1, 5)
    assert calls == [1]


def test_bearer_token_is_sent_and_never_shown() -> None:
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization"))
        return httpx.Response(200, json={"status": "ok"})

    client = make_client(handler, token="s3cret")
    client.healthz()
    assert seen == ["Bearer s3cret"]
    assert "s3cret" not in repr(client)


def test_url_and_token_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METASERVICE_URL", "http://env.test:1")
    monkeypatch.setenv("METASERVICE_TOKEN", "from-env")
    client = sp.MetaServiceClient()
    assert client.base_url == "http://env.test:1"
    assert client._http.headers["Authorization"] == "Bearer from-env"
    monkeypatch.delenv("METASERVICE_URL")
    # Neither: where `metaservice serve` listens by default.
    assert sp.MetaServiceClient().base_url == "http://127.0.0.1:8000"


def test_timeouts_are_explicit() -> None:
    client = sp.MetaServiceClient("http://ms.test")
    assert client._http.timeout == sp.DEFAULT_TIMEOUT
    assert None not in (client._http.timeout.connect, client._http.timeout.read,
                        client._http.timeout.write, client._http.timeout.pool)
    custom = sp.MetaServiceClient("http://ms.test", timeout=1.5)
    assert custom._http.timeout.read == 1.5


def test_requests_carry_the_contract_paths_and_bodies() -> None:
    seen: list[tuple[str, str, bytes]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, request.content))
        path = request.url.path
        if path.startswith("/register"):
            return httpx.Response(200, json={"job": "j", "state": "planned", "run": 0,
                                             "sources": ["a.b.c"], "sinks": []})
        if path.endswith("/start") or path.endswith("/next"):
            return httpx.Response(200, json={"action": "process", "barrier": 20,
                                             "snapshots": {"a.b.c": 2}, "previous": {"a.b.c": 1},
                                             "run": 1})
        return httpx.Response(200, json={"table": "a.b.d", "barrier": 20, "snapshot_id": 3})

    client = make_client(handler)
    assert client.register_source("j", "a.b.c").sources == ("a.b.c",)
    position = client.start_job("j", "earliest")
    assert (position.action, position.barrier, position.snapshots, position.previous) == (
        "process", 20, {"a.b.c": 2}, {"a.b.c": 1})
    client.next_barrier("j", None)
    client.commit("j", "a.b.d", 3, 20)
    assert seen[0][:2] == ("POST", "/register/source/j/a/b/c")
    assert seen[1] == ("POST", "/jobs/j/start", b'{"from":"earliest"}')
    assert seen[2] == ("POST", "/jobs/j/barriers/next", b'{"after":null}')
    assert seen[3] == ("POST", "/commit/j/a/b/d", b'{"snapshot_id":3,"barrier":20}')


def test_invalid_names_fail_before_any_request() -> None:
    client = make_client(lambda req: pytest.fail("no request expected"))
    with pytest.raises(ValueError):
        client.register_sink("job with spaces", "a.b.c")
    with pytest.raises(ValueError):
        client.register_sink("j", "a.b")
    with pytest.raises(ValueError):
        client.register_sink("j", "a.b/../c.d")


def test_unusable_answer_is_a_transport_error() -> None:
    client = make_client(lambda req: httpx.Response(200, json={"action": "teleport"}))
    with pytest.raises(sp.TransportError):
        client.next_barrier("j", None)
    client = make_client(lambda req: httpx.Response(200, text="not json"))
    with pytest.raises(sp.TransportError):
        client.healthz()


def test_release_of_an_unknown_lease_is_not_an_error_by_default() -> None:
    client = make_client(lambda req: error(404, "unknown_lease"))
    client.release_lease("gone")
    with pytest.raises(sp.UnknownLeaseError):
        client.release_lease("gone", missing_ok=False)


def test_a_lost_compare_and_swap_is_repeated_for_idempotent_calls_only() -> None:
    answers = [error(409, "concurrent_update"),
               httpx.Response(200, json={"table": "a.b.c", "barrier": 7, "snapshot_id": 9})]
    client = make_client(lambda req: answers.pop(0))
    assert client.commit("j", "a.b.c", 9, 7).barrier == 7
    client = make_client(lambda req: error(409, "concurrent_update"))
    with pytest.raises(sp.ConcurrentUpdateError):
        client.report_root_barrier("a.b.c", 9)  # the server would assign a new barrier
