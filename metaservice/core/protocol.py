"""The decisions of the barrier protocol (docs/contract.md#start, docs/contract.md#next), as pure
functions.

The service reads the state (``barriers/service.py``), these functions decide, the service
writes the decision. Nothing here touches a database, so the rules are checked in-process over
thousands of generated cases (``tests/metaservice/barriers/test_protocol.py``).

**Alignment** (the rule, and why strong cuts stay live, are in ``docs/decisions.md``): a job
that no other job of its component is ahead of *leads* and is handed the newest barrier at
which all its sources are exact. A job that others are ahead of (they completed, or hold, a
barrier newer than its previous one) *follows*: it is handed the newest barrier at which its
sources are exact and at which every job ahead of it is exact too — its sinks are exact there,
or it holds that very barrier. Siblings therefore skip barriers together, their sinks keep
sharing exact barriers, and the strong cut of the component keeps advancing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from metaservice.core.exactness import Exactness


@dataclass(frozen=True)
class OtherJob:
    """A running job of the same component, as alignment sees it."""

    name: str
    sinks: frozenset[str]
    pinned: int | None  # the barrier it holds

    def progress(self, exactness: Exactness) -> int | None:
        """The newest barrier it completed (all its sinks) or holds."""
        latests = [exactness.history.latest(k) for k in self.sinks]
        completed = None if not latests or any(b is None for b in latests) else min(latests)  # type: ignore[type-var]
        candidates = [b for b in (completed, self.pinned) if b is not None]
        return max(candidates) if candidates else None


def jobs_ahead(exactness: Exactness, others: Iterable[OtherJob],
               after: int | None) -> list[OtherJob]:
    """The jobs that completed or hold a barrier newer than ``after`` (any, when None)."""
    ahead = []
    for job in others:
        progress = job.progress(exactness)
        if progress is not None and (after is None or progress > after):
            ahead.append(job)
    return ahead


def choose_barrier(exactness: Exactness, sources: Sequence[str], after: int | None,
                   ahead: Sequence[OtherJob]) -> int | None:
    """The barrier to hand a job whose previous barrier is ``after`` (docs/contract.md#alignment
    with the alignment rule), or None when there is none yet (``wait``).

    The barrier is one a source completed (or one a job ahead holds), newer than ``after``,
    at which every source is exact, and at which every job in ``ahead`` is exact or which it
    holds.
    """
    history = exactness.history
    latests = [history.latest(s) for s in sources]
    if not sources or any(b is None for b in latests):
        return None
    held = sorted({j.pinned for j in ahead if j.pinned is not None})
    x: int | None = min(latests)  # type: ignore[type-var]
    while x is not None:
        x = exactness.greatest_candidate(sources, held, x)
        if x is None or (after is not None and x <= after):
            return None
        lower: list[int] = []
        for source in sources:
            bound = exactness.bound(source, x)
            if bound is None:
                return None
            if bound < x:
                lower.append(bound)
        for job in ahead:
            if job.pinned == x:
                continue
            sink_bounds = [exactness.bound(k, x) for k in job.sinks]
            exact_below = (None if not sink_bounds or any(b is None for b in sink_bounds)
                           else min(sink_bounds))  # type: ignore[type-var]
            if exact_below == x:
                continue
            alternatives = [b for b in (exact_below, job.pinned) if b is not None and b < x]
            if not alternatives:
                return None
            lower.append(max(alternatives))
        if not lower:
            return x
        x = min(lower)
    return None


def earliest_barrier(exactness: Exactness, sources: Sequence[str],
                     firsts: Sequence[int]) -> int | None:
    """The oldest barrier, at or after every source's earliest retained one, at which all
    sources are exact (``from: "earliest"``); None when there is none."""
    history = exactness.history
    latests = [b for b in (history.latest(s) for s in sources) if b is not None]
    if not sources or not firsts or len(latests) < len(sources):
        return None
    upper = min(latests)
    x = max(firsts)
    # The candidates are the barriers at which some source changed, oldest first: each step
    # moves strictly forward (``first_change`` answers a barrier after ``x``) and stops at the
    # least ``latest``, so the loop ends, after at most as many steps as there are barriers
    # in between. No cap: a cap would answer "none yet" where a barrier exists.
    while x <= upper:
        if all(exactness.is_exact(s, x) for s in sources):
            return x
        following = [history.first_change(s, x, None, upper) for s in sources]
        nxt = [b for b in following if b is not None]
        if not nxt:
            return None
        x = min(nxt)
    return None
