"""GET /metrics: Prometheus text with route templates, commits, version answers by consistency
type, lease operations, and gauges computed at scrape."""

from __future__ import annotations

import logging

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from metaservice.clock import ManualClock

T0 = 1_700_000_000_000


def _samples(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def test_metrics_count_requests_by_route_template_and_compute_lags(
        client: httpx.Client, clock: ManualClock) -> None:
    clock.set(T0)
    client.post("/register/source/j/lake/db/src")
    client.post("/register/sink/j/lake/db/dst")
    assert client.post("/tables/lake/db/src/barriers",
                       json={"snapshot_id": 1, "barrier": T0 - 5000}).status_code == 200
    assert client.post("/jobs/j/start").json()["barrier"] == T0 - 5000
    assert client.post("/commit/j/lake/db/dst",
                       json={"barrier": T0 - 5000, "snapshot_id": 2}).status_code == 200
    assert client.post("/tables/lake/db/src/barriers",
                       json={"snapshot_id": 3, "barrier": T0 - 2000}).status_code == 200
    assert client.post("/commit/j/lake/db/dst",
                       json={"barrier": 1, "snapshot_id": 9}).status_code == 409
    client.get("/version/strong/lake/db/dst")
    client.get("/version/weak/lake/db/src")
    client.post("/versions", json={"tables": ["lake.db.src"], "barrier": T0 - 2000})
    client.post("/versions", json={"tables": ["lake.db.nope"], "consistency": "weak"})
    lease = client.post("/leases", json={"holder": "q", "ttl_seconds": 60, "snapshots": [
        {"table": "lake.db.src", "snapshot_id": 3}]})
    assert lease.status_code in (200, 201), lease.text
    clock.set(T0 + 1000)

    samples = _samples(client)
    route = "/commit/{job}/{catalog}/{database}/{table}"
    assert samples[("metaservice_http_request_duration_seconds_count",
                    (("method", "POST"), ("route", route), ("status", "2xx")))] == 1
    assert samples[("metaservice_http_request_duration_seconds_count",
                    (("method", "POST"), ("route", route), ("status", "4xx")))] == 1
    assert not any("lake/db" in dict(labels).get("route", "") for _, labels in samples)
    assert samples[("metaservice_barrier_commits_total", (("kind", "job"),))] == 1
    assert samples[("metaservice_barrier_commits_total", (("kind", "root"),))] == 2
    assert samples[("metaservice_barrier_commit_refusals_total",
                    (("code", "barrier_regression"), ("kind", "job")))] == 1
    answers = {dict(labels)["consistency"] + "/" + dict(labels)["outcome"]: v
               for (name, labels), v in samples.items()
               if name == "metaservice_version_answers_total"}
    assert answers == {"strong/ok": 1, "weak/ok": 1, "barrier/ok": 1, "weak/unknown_table": 1}
    # Gauges at scrape: now = T0 + 1000.
    assert samples[("metaservice_table_lag_seconds", (("table", "lake.db.src"),))] == 3.0
    assert samples[("metaservice_table_lag_seconds", (("table", "lake.db.dst"),))] == 6.0
    assert samples[("metaservice_job_local_lag_seconds", (("job", "j"),))] == 3.0
    assert samples[("metaservice_running_jobs", ())] == 1
    assert samples[("metaservice_leases_active", ())] == 1
    assert samples[("metaservice_leased_snapshots", ())] == 1
    assert samples[("metaservice_lease_operations_total",
                    (("operation", "create"), ("outcome", "ok")))] == 1
    assert samples[("metaservice_pipeline_metrics_up", ())] == 1


def test_unknown_paths_share_one_label(client: httpx.Client) -> None:
    client.get("/no/such/path/1")
    client.get("/no/such/path/2")
    samples = _samples(client)
    assert samples[("metaservice_http_request_duration_seconds_count",
                    (("method", "GET"), ("route", "unmatched"), ("status", "4xx")))] == 2


def test_deeply_nested_json_is_counted_without_a_traceback(
        client: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    nested = b'{"tables": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    with caplog.at_level(logging.WARNING):
        response = client.post("/versions", content=nested,
                               headers={"content-type": "application/json"})
        assert 400 <= response.status_code < 500
        assert "error" in response.json()
        samples = _samples(client)
    assert [r for r in caplog.records if r.exc_info or r.name.startswith("metaservice")] == []
    answers = {dict(labels)["consistency"]: v for (name, labels), v in samples.items()
               if name == "metaservice_version_answers_total"}
    assert answers == {"invalid": 1}
    assert samples[("metaservice_http_request_duration_seconds_count",
                    (("method", "POST"), ("route", "/versions"), ("status", "4xx")))] == 1


def test_the_grafana_dashboard_only_queries_metrics_the_service_exposes(
        client: httpx.Client, clock: ManualClock) -> None:
    import json
    import re
    from pathlib import Path

    dashboard = json.loads((Path(__file__).parents[3] / "deploy" / "grafana" /
                            "metaservice.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"]
              if isinstance(v.get("query"), dict)]
    wanted = {m for e in exprs for m in re.findall(r"metaservice_[a-z_]+", e)}
    clock.set(T0)
    client.post("/register/source/j/lake/db/src")
    client.post("/register/sink/j/lake/db/dst")
    client.post("/tables/lake/db/src/barriers", json={"snapshot_id": 1, "barrier": T0})
    client.post("/jobs/j/start")
    client.post("/commit/j/lake/db/dst", json={"barrier": T0, "snapshot_id": 2})
    client.post("/commit/j/lake/db/dst", json={"barrier": 1, "snapshot_id": 2})
    client.get("/version/strong/lake/db/dst")
    client.post("/leases", json={"holder": "q", "ttl_seconds": 60,
                                 "snapshots": [{"table": "lake.db.src", "snapshot_id": 1}]})
    exposed = {name for name, _ in _samples(client)}
    assert wanted and wanted <= exposed, wanted - exposed
