"""Prometheus metrics: what each request cost, what the pipeline looks like right now.

Two kinds:

- **Counted as requests pass** (an ASGI middleware, so no domain code carries metric calls):
  request latency per route *template* (``/commit/{job}/{catalog}/{database}/{table}``, never the
  raw path, so label cardinality stays bounded), commits and root reports, version answers by
  consistency type (``strong``, ``weak``, ``barrier``) and outcome, lease operations.
- **Computed at scrape** from the database (a collector): table lag and job local lag
  (docs/contract.md#delay), the recent hop latency per job, active leases and the snapshots they
  hold, tables fenced by a rollback, and the OpenLineage outbox: events pending, jobs whose last
  delivery failed, the age of the oldest event; with the events this process's sender delivered and
  the deliveries that failed.

Each app has its own registry (several apps live in one test process); a multi-process
deployment is scraped per process (the scrape-time gauges read the shared database, so every
process reports the same values for them).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from metaservice.context import ServiceContext
from metaservice.core import delay_formulas as formulas
from metaservice.db.models import LeaseRow, LeaseSnapshotRow, RollbackFenceRow
from metaservice.db.session import Database
from metaservice.lineage.sender import OutboxSender
from metaservice.repositories import delay as delay_repo
from metaservice.repositories import lineage as outbox_repo

logger = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

_COMMIT_ROUTES = {
    ("POST", "/commit/{job}/{catalog}/{database}/{table}"): "job",
    ("POST", "/tables/{catalog}/{database}/{table}/barriers"): "root",
}
_VERSION_ROUTES = {("GET", "/version/{consistency}/{catalog}/{database}/{table}"),
                   ("POST", "/versions")}
_LEASE_ROUTES = {
    ("POST", "/leases"): "create",
    ("POST", "/leases/{lease_id}/renew"): "renew",
    ("DELETE", "/leases/{lease_id}"): "release",
}
_MAX_PEEKED_BODY = 64 * 1024


class Metrics:
    """The registry of one app and its request-time metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.request_seconds = Histogram(
            "metaservice_http_request_duration_seconds",
            "Time to answer a request, by route template, method and status class.",
            ["method", "route", "status"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.commits = Counter(
            "metaservice_barrier_commits",
            "Completed barriers accepted: job commits (kind=job) and root reports (kind=root).",
            ["kind"], registry=self.registry)
        self.commit_refusals = Counter(
            "metaservice_barrier_commit_refusals",
            "Commits and root reports refused, by error code.",
            ["kind", "code"], registry=self.registry)
        self.version_answers = Counter(
            "metaservice_version_answers",
            "Version answers by consistency type (strong, weak, barrier) and outcome.",
            ["consistency", "outcome"], registry=self.registry)
        self.lease_operations = Counter(
            "metaservice_lease_operations",
            "Lease operations (create, renew, release) by outcome.",
            ["operation", "outcome"], registry=self.registry)

    def observe(self, method: str, route: str, status: int, seconds: float,
                path_params: dict[str, Any], request_body: bytes | None,
                error_code: str | None) -> None:
        outcome = "ok" if status < 400 else (error_code or f"http_{status}")
        self.request_seconds.labels(method, route, f"{status // 100}xx").observe(seconds)
        key = (method, route)
        if key in _COMMIT_ROUTES:
            if status < 400:
                self.commits.labels(_COMMIT_ROUTES[key]).inc()
            else:
                self.commit_refusals.labels(_COMMIT_ROUTES[key], outcome).inc()
        elif key in _VERSION_ROUTES:
            self.version_answers.labels(_consistency(path_params, request_body), outcome).inc()
        elif key in _LEASE_ROUTES:
            self.lease_operations.labels(_LEASE_ROUTES[key], outcome).inc()


def _consistency(path_params: dict[str, Any], body: bytes | None) -> str:
    if "consistency" in path_params:
        value = str(path_params["consistency"])
        return value if value in ("strong", "weak") else "invalid"
    try:
        data = json.loads(body or b"{}")
    except (ValueError, RecursionError):  # RecursionError: deeply nested JSON
        return "invalid"
    if not isinstance(data, dict):
        return "invalid"
    if data.get("barrier") is not None:
        return "barrier"
    value = data.get("consistency", "strong")
    return value if value in ("strong", "weak") else "invalid"


class MetricsMiddleware:
    """Pure ASGI: times each HTTP request and labels it with the route the router matched."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        method = scope["method"]
        status = 500
        body: list[bytes] = []
        error_body: list[bytes] = []
        peek_request = method == "POST" and scope.get("path") == "/versions"

        async def receive_peeking() -> Any:
            message = await receive()
            if message["type"] == "http.request" and sum(map(len, body)) < _MAX_PEEKED_BODY:
                body.append(message.get("body", b""))
            return message

        async def send_observing(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif (message["type"] == "http.response.body" and status >= 400
                  and sum(map(len, error_body)) < 4096):
                error_body.append(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive_peeking if peek_request else receive, send_observing)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            try:
                self.metrics.observe(method, template, status, time.perf_counter() - started,
                                     scope.get("path_params") or {},
                                     b"".join(body) if peek_request else None,
                                     _error_code(b"".join(error_body)) if error_body else None)
            except Exception:  # noqa: BLE001 - metrics never break a request
                logger.warning("metrics_observe_failed", exc_info=True)


def _error_code(body: bytes) -> str | None:
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    return code if isinstance(code, str) and len(code) <= 64 else None


class PipelineCollector(Collector):
    """Gauges computed from the database at each scrape."""

    def __init__(self, database: Database, context: ServiceContext,
                 lineage_sender: OutboxSender | None = None) -> None:
        self.database = database
        self.context = context
        self.lineage_sender = lineage_sender

    def describe(self) -> Iterable[Metric]:
        return []  # computed at scrape; nothing to describe up front

    def collect(self) -> Iterator[Metric]:
        try:
            yield from self._collect()
        except Exception:  # noqa: BLE001 - an unreachable database must not fail the scrape
            logger.warning("metrics_collect_failed", exc_info=True)
            up = GaugeMetricFamily("metaservice_pipeline_metrics_up",
                                   "1 when the scrape-time gauges could be computed.")
            up.add_metric([], 0)
            yield up

    def _collect(self) -> Iterator[Metric]:
        now = self.context.clock.now_ms()
        with self.database.transaction(write=False) as session:
            topology = self.context.topology_cache.get(session)
            tables = delay_repo.all_tables(session)
            recent = delay_repo.recent_hops(session, since_ms=now - 3_600_000)
            active = session.scalar(select(func.count()).select_from(LeaseRow)
                                    .where(LeaseRow.expires_at > now)) or 0
            leased = session.scalar(
                select(func.count()).select_from(LeaseSnapshotRow)
                .join(LeaseRow, LeaseRow.id == LeaseSnapshotRow.lease_id)
                .where(LeaseRow.expires_at > now)) or 0
            fenced = session.scalar(select(func.count()).select_from(RollbackFenceRow)) or 0
            outbox = outbox_repo.standing(session)
        latest = {t.name: t.latest_barrier for t in tables}

        table_lag = GaugeMetricFamily("metaservice_table_lag_seconds",
                                      "now − latest(T): how old the newest complete data is.",
                                      labels=["table"])
        for t in sorted(tables, key=lambda t: t.name):
            lag = formulas.table_lag(now, t.latest_barrier)
            if lag is not None:
                table_lag.add_metric([t.name], lag / 1000)
        yield table_lag

        local = GaugeMetricFamily(
            "metaservice_job_local_lag_seconds",
            "min over sources of latest − min over sinks of latest, per running job.",
            labels=["job"])
        hop = GaugeMetricFamily("metaservice_job_hop_latency_seconds",
                                "Hop latency of the barrier each job finished last (last hour).",
                                labels=["job"])
        for name in sorted(topology.jobs):
            edges = topology.jobs[name]
            value = formulas.job_local_lag((latest.get(s) for s in edges.sources),
                                           (latest.get(k) for k in edges.sinks))
            if value is not None:
                local.add_metric([name], value / 1000)
            h = recent.get(name)
            latency = formulas.hop_latency(h.sources_ready_at, h.finished_at) if h else None
            if latency is not None:
                hop.add_metric([name], latency / 1000)
        yield local
        yield hop

        for metric, help_text, amount in (
            ("metaservice_running_jobs", "Jobs in the topology.", len(topology.jobs)),
            ("metaservice_tables", "Tables known to the service.", len(tables)),
            ("metaservice_leases_active", "Leases not expired.", active),
            ("metaservice_leased_snapshots", "Snapshots held by leases not expired.", leased),
            ("metaservice_rollback_fenced_tables",
             "Tables fenced by an applied rollback plan not completed yet.", fenced),
            ("metaservice_lineage_events_pending",
             "OpenLineage events in the outbox, not delivered yet.", float(outbox.pending)),
            ("metaservice_lineage_jobs_failing",
             "OpenLineage jobs whose last delivery failed: their events wait, retried with "
             "backoff.", float(outbox.failing_jobs)),
            ("metaservice_lineage_oldest_pending_seconds",
             "Age of the oldest OpenLineage event not delivered yet (0: none).",
             0 if outbox.oldest_created_at is None
             else max(0, now - outbox.oldest_created_at) / 1000),
            ("metaservice_pipeline_metrics_up", "1 when the scrape-time gauges could be computed.",
             1),
        ):
            gauge = GaugeMetricFamily(metric, help_text)
            gauge.add_metric([], amount)
            yield gauge
        counts = self.lineage_sender.counts if self.lineage_sender is not None else None
        for metric, help_text, value in (
            ("metaservice_lineage_events_sent",
             "OpenLineage events this process's sender delivered.",
             counts.sent if counts else 0),
            ("metaservice_lineage_delivery_failures",
             "Deliveries of OpenLineage events that failed in this process (each is retried).",
             counts.failed if counts else 0),
        ):
            counter = CounterMetricFamily(metric, help_text)
            counter.add_metric([], value)
            yield counter


def install_metrics(app: Any) -> Metrics:
    """Create the app's registry, its middleware and its scrape-time collector."""
    metrics = Metrics()
    metrics.registry.register(PipelineCollector(app.state.database, app.state.context,
                                                getattr(app.state, "lineage_sender", None)))
    app.state.metrics = metrics
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return metrics
