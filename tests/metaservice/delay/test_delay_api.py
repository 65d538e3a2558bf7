"""GET /delay and GET /delay/{table} over the real HTTP API, times from the injected clock.

    r (root) ──j1──▶ t1 ──j2──▶ t2
"""

from __future__ import annotations

import httpx

from metaservice.clock import ManualClock

T0 = 1_700_000_000_000


def _ok(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def _pipeline(client: httpx.Client, clock: ManualClock) -> None:
    clock.set(T0)
    for path in ("/register/source/j1/lake/db/r", "/register/sink/j1/lake/db/t1",
                 "/register/source/j2/lake/db/t1", "/register/sink/j2/lake/db/t2"):
        _ok(client.post(path))
    _ok(client.post("/tables/lake/db/r/barriers", json={"snapshot_id": 1, "barrier": T0}))
    assert _ok(client.post("/jobs/j1/start"))["barrier"] == T0           # sources ready at T0
    clock.advance(100)
    _ok(client.post("/commit/j1/lake/db/t1", json={"barrier": T0, "snapshot_id": 11}))  # hop 100
    assert _ok(client.post("/jobs/j2/start"))["barrier"] == T0           # ready at T0 + 100
    clock.advance(300)
    _ok(client.post("/commit/j2/lake/db/t2", json={"barrier": T0, "snapshot_id": 21}))  # hop 300
    clock.set(T0 + 1000)
    _ok(client.post("/tables/lake/db/r/barriers", json={"snapshot_id": 2, "barrier": T0 + 1000}))
    assert _ok(client.post("/jobs/j1/barriers/next", json={"after": T0}))["barrier"] == T0 + 1000
    clock.advance(50)
    _ok(client.post("/commit/j1/lake/db/t1", json={"barrier": T0 + 1000, "snapshot_id": 12}))
    clock.set(T0 + 2000)


def test_table_delay_decomposes_the_lag_and_names_the_bottleneck(
        client: httpx.Client, clock: ManualClock) -> None:
    _pipeline(client, clock)
    body = _ok(client.get("/delay/lake/db/t2"))
    assert body["now"] == T0 + 2000
    assert body["lag_ms"] == 2000
    assert [(h["job"], h["source"], h["sink"], h["lag_ms"], h["recent_hop_latency_ms"])
            for h in body["path"]] == [("j2", "lake.db.t1", "lake.db.t2", 1000, 300),
                                       ("j1", "lake.db.r", "lake.db.t1", 0, 50)]
    assert body["root"] == {"table": "lake.db.r", "latest_barrier": T0 + 1000, "lag_ms": 1000}
    assert body["bottleneck"]["job"] == "j2" and body["bottleneck"]["local_lag_ms"] == 1000
    assert [j["job"] for j in body["upstream_jobs"]] == ["j2", "j1"]
    assert body["end_to_end_latency_ms"] == {"count": 1, "p50": 400, "p95": 400, "p99": 400,
                                             "max": 400}


def test_overview_lists_every_table_and_job_with_percentiles(
        client: httpx.Client, clock: ManualClock) -> None:
    _pipeline(client, clock)
    body = _ok(client.get("/delay"))
    tables = {t["table"]: t for t in body["tables"]}
    assert {n: (t["lag_ms"], t["writer_job"], t["bottleneck_job"]) for n, t in tables.items()} == {
        "lake.db.r": (1000, None, None), "lake.db.t1": (1000, "j1", "j1"),
        "lake.db.t2": (2000, "j2", "j2")}
    assert tables["lake.db.t1"]["end_to_end_latency_ms"]["count"] == 2
    assert tables["lake.db.t1"]["end_to_end_latency_ms"]["p50"] == 50
    assert tables["lake.db.t1"]["end_to_end_latency_ms"]["p99"] == 100
    jobs = {j["job"]: j for j in body["jobs"]}
    assert jobs["j1"]["local_lag_ms"] == 0 and jobs["j2"]["local_lag_ms"] == 1000
    assert jobs["j1"]["recent_barrier"] == T0 + 1000
    assert jobs["j1"]["hop_latency_ms"] == {"count": 2, "p50": 50, "p95": 100, "p99": 100,
                                            "max": 100}
    assert body["bottleneck"]["job"] == "j2"


def test_a_job_that_produced_nothing_yet_is_the_bottleneck(
        client: httpx.Client, clock: ManualClock) -> None:
    """r ──j1──▶ t1 ──j2──▶ t2 ──j3──▶ t3: j1 is 1000 ms behind r; j2 started but never
    committed, so t2 has no barrier and j2's lag is unknown because it is unbounded: j2, not
    j1, holds t2 and t3 back. j3 has no input yet: it waits for j2 and is not named."""
    clock.set(T0)
    for path in ("/register/source/j1/lake/db/r", "/register/sink/j1/lake/db/t1",
                 "/register/source/j2/lake/db/t1", "/register/sink/j2/lake/db/t2",
                 "/register/source/j3/lake/db/t2", "/register/sink/j3/lake/db/t3"):
        _ok(client.post(path))
    _ok(client.post("/tables/lake/db/r/barriers", json={"snapshot_id": 1, "barrier": T0}))
    assert _ok(client.post("/jobs/j1/start"))["barrier"] == T0
    _ok(client.post("/commit/j1/lake/db/t1", json={"barrier": T0, "snapshot_id": 11}))
    assert _ok(client.post("/jobs/j2/start"))["barrier"] == T0
    _ok(client.post("/jobs/j3/start"))
    clock.set(T0 + 1000)
    _ok(client.post("/tables/lake/db/r/barriers", json={"snapshot_id": 2, "barrier": T0 + 1000}))
    clock.set(T0 + 2000)

    for table in ("t2", "t3"):
        body = _ok(client.get(f"/delay/lake/db/{table}"))
        assert body["bottleneck"]["job"] == "j2", (table, body["bottleneck"])
        assert body["bottleneck"]["local_lag_ms"] is None
        assert body["upstream_jobs"][0]["job"] == "j2"
    assert _ok(client.get("/delay/lake/db/t3"))["upstream_jobs"][-1]["job"] == "j3"
    assert _ok(client.get("/delay/lake/db/t1"))["bottleneck"]["job"] == "j1"
    overview = _ok(client.get("/delay"))
    tables = {t["table"]: t["bottleneck_job"] for t in overview["tables"]}
    assert tables == {"lake.db.r": None, "lake.db.t1": "j1", "lake.db.t2": "j2",
                      "lake.db.t3": "j2"}
    assert overview["bottleneck"]["job"] == "j2"


def test_the_window_limits_the_percentiles(client: httpx.Client, clock: ManualClock) -> None:
    _pipeline(client, clock)
    body = _ok(client.get("/delay", params={"window_seconds": 1}))   # since T0 + 1000
    jobs = {j["job"]: j for j in body["jobs"]}
    assert jobs["j1"]["hop_latency_ms"]["count"] == 1 and jobs["j1"]["hop_latency_ms"]["p50"] == 50
    assert jobs["j2"]["hop_latency_ms"]["count"] == 0
    assert jobs["j2"]["recent_hop_latency_ms"] is None


def test_unknown_table_and_bad_window(client: httpx.Client) -> None:
    r = client.get("/delay/lake/db/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_table"
    r = client.get("/delay", params={"window_seconds": 0})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"


def test_answers_match_their_documented_models(client: httpx.Client, clock: ManualClock) -> None:
    from metaservice.delay.schemas import DelayOut, TableDelayDetailOut

    _pipeline(client, clock)
    DelayOut.model_validate(_ok(client.get("/delay")), strict=True)
    for table in ("r", "t1", "t2"):
        TableDelayDetailOut.model_validate(_ok(client.get(f"/delay/lake/db/{table}")),
                                           strict=True)


def test_delay_names_the_job_and_table_holding_a_strong_cut(client: httpx.Client,
                                                            clock: ManualClock) -> None:
    """r → A → t1, then B (t1 → t2) started and never committed while A completed five more
    barriers: every table of the pipeline names t2 and B as what holds its strong cut."""
    from metaservice.delay.schemas import DelayOut, TableDelayDetailOut
    from tests.metaservice.versions.test_held_cut import (
        HOLD,
        a_completes_five_more,
        start_b_beside_a,
    )

    start_b_beside_a(client, clock)
    a_completes_five_more(client, clock)
    overview = _ok(client.get("/delay"))
    DelayOut.model_validate(overview, strict=True)
    assert {t["table"]: t["held_back_by"] for t in overview["tables"]} == {
        "lake.db.r": [HOLD], "lake.db.t1": [HOLD], "lake.db.t2": [HOLD]}
    for table in ("r", "t1", "t2"):
        detail = _ok(client.get(f"/delay/lake/db/{table}"))
        TableDelayDetailOut.model_validate(detail, strict=True)
        assert detail["held_back_by"] == [HOLD]

    _ok(client.post("/unregister/B"))
    assert {t["table"]: t["held_back_by"] for t in _ok(client.get("/delay"))["tables"]} == {
        "lake.db.r": [], "lake.db.t1": [], "lake.db.t2": []}
    assert _ok(client.get("/delay/lake/db/t1"))["held_back_by"] == []
