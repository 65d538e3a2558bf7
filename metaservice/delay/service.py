"""Delay answers (docs/contract.md#delay): read the few rows they need, then apply
``core/delay_formulas.py``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy.orm import Session

from metaservice import errors
from metaservice.context import ServiceContext
from metaservice.core import delay_formulas as formulas
from metaservice.core.delay_formulas import JobDelayInput, Percentiles
from metaservice.core.graph import Topology
from metaservice.names import TableName
from metaservice.repositories import delay as delay_repo
from metaservice.repositories import tables as tables_repo
from metaservice.versions import service as versions

DEFAULT_WINDOW_SECONDS = 3600.0


# The answers are plain dicts in the shapes of ``delay/schemas.py`` (which documents them in
# OpenAPI, and against which the tests validate them): for 1,000 tables and jobs, building and
# validating 4,000 nested models cost more than computing the answer.
def _percentiles_out(p: Percentiles | None) -> dict[str, Any]:
    if p is None:
        return {"count": 0, "p50": None, "p95": None, "p99": None, "max": None}
    return {"count": p.count, "p50": p.p50, "p95": p.p95, "p99": p.p99, "max": p.max}


class _JobFigures:
    """Per job: local lag, most recent finished hop, hop latency percentiles in the window."""

    def __init__(self, topology: Topology, jobs: Iterable[str], latest: dict[str, int | None],
                 recent: dict[str, delay_repo.RecentHop],
                 latencies: dict[str, Percentiles]) -> None:
        self.topology = topology
        self.recent = recent
        self.latencies = latencies
        self.local_lag: dict[str, int | None] = {}
        self.stalled: set[str] = set()  # produced nothing yet though their input is there
        for job in jobs:
            edges = topology.jobs[job]
            sources = [latest.get(s) for s in edges.sources]
            sinks = [latest.get(k) for k in edges.sinks]
            self.local_lag[job] = formulas.job_local_lag(sources, sinks)
            if formulas.produced_nothing(sources, sinks):
                self.stalled.add(job)

    def recent_hop(self, job: str) -> int | None:
        h = self.recent.get(job)
        return None if h is None else formulas.hop_latency(h.sources_ready_at, h.finished_at)

    def out(self, job: str) -> dict[str, Any]:
        edges = self.topology.jobs[job]
        h = self.recent.get(job)
        return dict(
            job=job, sources=sorted(edges.sources), sinks=sorted(edges.sinks),
            local_lag_ms=self.local_lag[job], recent_barrier=h.barrier if h else None,
            recent_hop_latency_ms=self.recent_hop(job),
            hop_latency_ms=_percentiles_out(self.latencies.get(job)))

    def ranked(self, jobs: Iterable[str]) -> list[str]:
        """Worst first (the bottleneck order of docs/contract.md#delay)."""
        listed = list(jobs)
        ranks = formulas.name_ranks(listed)
        return sorted(listed, reverse=True, key=lambda j: formulas.bottleneck_key(
            self.local_lag[j], self.recent_hop(j), ranks[j], stalled=j in self.stalled))

    def worst(self, jobs: Iterable[str]) -> str | None:
        return formulas.pick_bottleneck(
            ((j, self.local_lag[j], self.recent_hop(j)) for j in jobs), self.stalled)


def _writer_inputs(topology: Topology) -> dict[str, JobDelayInput]:
    writer_of: dict[str, JobDelayInput] = {}
    for j in topology.jobs.values():
        for sink in j.sinks:
            writer_of[sink] = JobDelayInput(j.job, j.sources, j.sinks)
    return writer_of


def _held_back_by(holds: tuple[versions.TableHold, ...]) -> list[dict[str, Any]]:
    return [h.details() for h in holds]


def _window_start(now: int, window_seconds: float) -> int:
    return now - int(window_seconds * 1000)


def overview(session: Session, ctx: ServiceContext, window_seconds: float) -> dict[str, Any]:
    """Every table and running job, with percentiles over the window."""
    now = ctx.clock.now_ms()
    since = _window_start(now, window_seconds)
    topology = ctx.topology_cache.get(session)
    tables = delay_repo.all_tables(session)
    latest = {t.name: t.latest_barrier for t in tables}
    hops = delay_repo.hop_figures(session, since_ms=since)
    figures = _JobFigures(topology, topology.jobs, latest, hops.recent, hops.latencies)
    samples = delay_repo.end_to_end_percentiles(session, since_ms=since)
    writer_of = _writer_inputs(topology)
    names = sorted(latest)
    bottlenecks = formulas.bottlenecks_by_table(
        names, writer_of, figures.local_lag, {j: figures.recent_hop(j) for j in topology.jobs},
        figures.stalled)
    # Only the components with a catching-up table can have their strong cut held.
    holds = versions.cut_holds(session, ctx, [t.name for t in tables if t.catching_up])
    table_out = [
        dict(table=t.name, latest_barrier=t.latest_barrier,
             latest_committed_at=t.latest_committed_at,
             lag_ms=formulas.table_lag(now, t.latest_barrier),
             writer_job=writer_of[t.name].job if t.name in writer_of else None,
             bottleneck_job=bottlenecks.get(t.name),
             held_back_by=_held_back_by(holds.get(t.name, ())),
             end_to_end_latency_ms=_percentiles_out(samples.get(t.id)))
        for t in sorted(tables, key=lambda t: t.name)
    ]
    worst = figures.worst(topology.jobs)
    return dict(now=now, window_seconds=window_seconds,
                bottleneck=figures.out(worst) if worst else None,
                tables=table_out, jobs=[figures.out(j) for j in sorted(topology.jobs)])


def table_delay(session: Session, ctx: ServiceContext, name: TableName,
                window_seconds: float) -> dict[str, Any]:
    """One table's lag decomposed hop by hop along its critical path, and its bottleneck."""
    now = ctx.clock.now_ms()
    since = _window_start(now, window_seconds)
    topology = ctx.topology_cache.get(session)
    qualified = str(name)
    upstream = topology.upstream(qualified)
    tables = delay_repo.tables_named(session, upstream.tables)
    this = next((t for t in tables if t.name == qualified), None)
    if this is None:
        raise errors.UnknownTableError.among([qualified], tables_repo.qualified_names(session))
    latest = {t.name: t.latest_barrier for t in tables}
    hops = delay_repo.hop_figures(session, since_ms=since, jobs=upstream.jobs)
    figures = _JobFigures(topology, upstream.jobs, latest, hops.recent, hops.latencies)
    decomposition = formulas.decompose_lag(qualified, now, latest, _writer_inputs(topology))
    ranked = figures.ranked(upstream.jobs)
    e2e = delay_repo.end_to_end_percentiles(session, since_ms=since,
                                            table_ids=[this.id]).get(this.id)
    return dict(
        table=qualified, now=now, window_seconds=window_seconds,
        latest_barrier=this.latest_barrier, lag_ms=decomposition.lag_ms,
        path=[dict(job=h.job, source=h.source, sink=h.sink, source_latest=h.source_latest,
                   sink_latest=h.sink_latest, lag_ms=h.lag_ms,
                   recent_hop_latency_ms=figures.recent_hop(h.job))
              for h in decomposition.hops],
        root=(dict(table=decomposition.root, latest_barrier=decomposition.root_latest,
                   lag_ms=decomposition.root_lag_ms)
              if decomposition.root else None),
        bottleneck=figures.out(ranked[0]) if ranked else None,
        upstream_jobs=[figures.out(j) for j in ranked],
        held_back_by=_held_back_by(versions.cut_holds(session, ctx, [qualified]).get(
            qualified, ())),
        end_to_end_latency_ms=_percentiles_out(e2e))
