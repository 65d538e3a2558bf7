"""The delay formulas of docs/contract.md#delay as pure functions over plain data.

Barriers are wall-clock milliseconds, so every delay is a difference of two barriers or of a
barrier and a time:

- ``lag(T) = now − latest(T)``: how old the newest complete data in T is;
- job local lag ``min over sources of latest(s) − min over sinks of latest(k)``: how far the job
  is behind its own inputs;
- hop latency of a job for barrier B: ``finished_at − sources_ready_at`` of its progress record;
- end-to-end latency of T's barrier B: ``committed_at − B``;
- T's lag decomposed along its *critical path*: from T, step to the writer job's source with the
  smallest ``latest`` (the one that holds the job back), until a root. The terms telescope::

      lag(T) = (now − latest(root)) + Σ over hops (latest(source) − latest(sink))

- the bottleneck of T: among the jobs upstream of T, the greatest local lag, then the greatest
  recent hop latency, then the name (so the answer is deterministic). A job that has produced
  nothing yet while every source has data (:func:`produced_nothing`) has no local lag to
  compare because it is unbounded: it ranks above every known one. A job whose local lag is
  unknown for want of input (a source with no barrier) ranks below every known one: it waits
  for another job, which is the one to name.

Nothing here touches a database or HTTP; ``delay/service.py`` feeds these functions.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class JobDelayInput:
    """What the formulas need to know of one running job."""

    job: str
    sources: frozenset[str]
    sinks: frozenset[str]
    recent_hop_latency_ms: int | None = None


def table_lag(now_ms: int, latest: int | None) -> int | None:
    """``now − latest(T)``; None while T has no completed barrier."""
    return None if latest is None else now_ms - latest


def job_local_lag(source_latests: Iterable[int | None],
                  sink_latests: Iterable[int | None]) -> int | None:
    """``min over sources of latest − min over sinks of latest``.

    None when it is not defined: the job has no sources (ingestion) or no sinks, some source has
    no barrier yet (nothing to be behind of), or some sink has none (the job has produced nothing
    yet; its delay then shows as the lag of its sinks).
    """
    sources, sinks = list(source_latests), list(sink_latests)
    if not sources or not sinks or any(b is None for b in sources) or any(b is None for b in sinks):
        return None
    return min(sources) - min(sinks)  # type: ignore[type-var,operator]


def produced_nothing(source_latests: Iterable[int | None],
                     sink_latests: Iterable[int | None]) -> bool:
    """The job has input (every source completed a barrier; a job with no sources has all it
    needs) but some sink has completed none: it is further behind than any job with a known
    local lag, however large."""
    sources, sinks = list(source_latests), list(sink_latests)
    return bool(sinks) and any(b is None for b in sinks) and all(b is not None for b in sources)


def hop_latency(sources_ready_at: int | None, finished_at: int | None) -> int | None:
    """From the moment B was complete in all sources to the moment it was committed in all sinks."""
    if sources_ready_at is None or finished_at is None:
        return None
    return finished_at - sources_ready_at


def end_to_end_latency(barrier: int, committed_at: int) -> int:
    """How long after its barrier time the data of barrier B was committed in T."""
    return committed_at - barrier


def percentile(values: Sequence[int], p: float) -> int | None:
    """The nearest-rank percentile (an observed value, never an interpolation); None if empty."""
    return _nearest_rank(sorted(values), p) if values else None


def _nearest_rank(ordered: Sequence[int], p: float) -> int:
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


@dataclass(frozen=True)
class Percentiles:
    count: int
    p50: int | None
    p95: int | None
    p99: int | None
    max: int | None

    @classmethod
    def of(cls, values: Sequence[int]) -> Percentiles:
        if not values:
            return cls(0, None, None, None, None)
        ordered = sorted(values)
        return cls(len(ordered), _nearest_rank(ordered, 50), _nearest_rank(ordered, 95),
                   _nearest_rank(ordered, 99), ordered[-1])


# -- the decomposition of a table's lag ---------------------------------------------------------


@dataclass(frozen=True)
class Hop:
    """One job on the critical path and how much of the lag it adds:
    ``latest(source) − latest(sink)``."""

    job: str
    source: str
    sink: str
    source_latest: int | None
    sink_latest: int | None
    lag_ms: int | None


@dataclass
class LagDecomposition:
    """``lag(T) = root_lag_ms + Σ hop.lag_ms`` (when every term is known)."""

    table: str
    lag_ms: int | None
    hops: list[Hop] = field(default_factory=list)  # from T up to the root
    root: str | None = None
    root_latest: int | None = None
    root_lag_ms: int | None = None


def _critical_source(sources: Iterable[str], latest: Mapping[str, int | None]) -> str:
    """The source that holds the job back: no barrier at all first, then the smallest latest."""
    return min(sources, key=lambda s: (latest.get(s) is not None, latest.get(s) or 0, s))


def decompose_lag(table: str, now_ms: int, latest: Mapping[str, int | None],
                  writer_of: Mapping[str, JobDelayInput]) -> LagDecomposition:
    """T's lag, hop by hop along its critical path up to a root (a table no running job writes,
    or one whose writer has no sources). Stops early where a term is unknown."""
    result = LagDecomposition(table=table, lag_ms=table_lag(now_ms, latest.get(table)))
    node, seen = table, {table}
    while True:
        job = writer_of.get(node)
        if job is None or not job.sources:
            result.root = node
            result.root_latest = latest.get(node)
            result.root_lag_ms = table_lag(now_ms, latest.get(node))
            return result
        source = _critical_source(job.sources, latest)
        s_latest, k_latest = latest.get(source), latest.get(node)
        lag = None if s_latest is None or k_latest is None else s_latest - k_latest
        result.hops.append(Hop(job.job, source, node, s_latest, k_latest, lag))
        if s_latest is None or source in seen:  # the path ends where the data does
            return result
        seen.add(source)
        node = source


# -- the bottleneck ----------------------------------------------------------------------------


BottleneckKey = tuple[bool, bool, int, bool, int, int]


def name_ranks(names: Iterable[str]) -> dict[str, int]:
    """Tie-break values for :func:`bottleneck_key`: the alphabetically first name ranks highest."""
    return {name: -i for i, name in enumerate(sorted(set(names)))}


def bottleneck_key(local_lag_ms: int | None, recent_hop_latency_ms: int | None,
                   name_rank: int, *, stalled: bool = False) -> BottleneckKey:
    """Orders jobs by the rule of docs/contract.md#delay: greatest local lag, then greatest recent
    hop latency. A ``stalled`` job (:func:`produced_nothing`) ranks above every other: its lag is
    unknown because it is unbounded. Otherwise unknown values rank below known ones. The name breaks
    ties (``name_ranks``: the alphabetically first wins), so the answer is deterministic."""
    return (stalled, local_lag_ms is not None, local_lag_ms or 0,
            recent_hop_latency_ms is not None, recent_hop_latency_ms or 0, name_rank)


def pick_bottleneck(candidates: Iterable[tuple[str, int | None, int | None]],
                    stalled: Collection[str] = frozenset()) -> str | None:
    """The bottleneck among ``(job, local_lag_ms, recent_hop_latency_ms)``; None if no job.
    ``stalled`` names the jobs that produced nothing yet (:func:`produced_nothing`)."""
    listed = list(candidates)
    ranks = name_ranks(job for job, _, _ in listed)
    best: tuple[BottleneckKey, str] | None = None
    for job, local, hop in listed:
        key = bottleneck_key(local, hop, ranks[job], stalled=job in stalled)
        if best is None or key > best[0]:
            best = (key, job)
    return None if best is None else best[1]


def bottlenecks_by_table(tables: Iterable[str], writer_of: Mapping[str, JobDelayInput],
                         local_lag: Mapping[str, int | None],
                         recent_hop: Mapping[str, int | None],
                         stalled: Collection[str] = frozenset()) -> dict[str, str | None]:
    """The bottleneck of every table at once, in O(tables + edges).

    The bottleneck of T is the best job upstream of T; since "best" is a total order, it is the
    best of T's writer and of the bottlenecks of the writer's sources (memoised, iteratively so a
    deep pipeline does not exhaust the stack). The topology has no cycles
    (docs/contract.md#no-cycles).
    """
    memo: dict[str, str | None] = {}
    ranks = name_ranks(w.job for w in writer_of.values())
    keys: dict[str, BottleneckKey] = {}

    def key(job: str) -> BottleneckKey:
        if job not in keys:
            keys[job] = bottleneck_key(local_lag.get(job), recent_hop.get(job), ranks[job],
                                       stalled=job in stalled)
        return keys[job]

    for start in tables:
        if start in memo:
            continue
        stack, expanded = [start], set()
        while stack:
            node = stack[-1]
            if node in memo:
                stack.pop()
                continue
            writer = writer_of.get(node)
            if writer is None:
                memo[node] = None
                stack.pop()
                continue
            pending = [s for s in writer.sources if s not in memo]
            if pending and node not in expanded:
                expanded.add(node)
                stack.extend(pending)
                continue
            best: str | None = writer.job
            for s in writer.sources:
                other = memo.get(s)  # missing only on a cycle, which the topology refuses
                if other is not None and key(other) > key(best):  # type: ignore[arg-type]
                    best = other
            memo[node] = best
            stack.pop()
    return {t: memo[t] for t in tables}
