"""The wall-clock barrier rule (docs/contract.md#root-reports): a writer that chooses its own
barrier takes the time in milliseconds, or one more than the latest barrier when the clock is not
past it.

Every writer of the plugin that picks a barrier (:func:`~spark_plugin.append_root`, the
streaming sink of a query without sources, a :class:`~spark_plugin.BarrierJob` without sources)
picks it here; so can any other writer of a root table, e.g. an ingestion that commits with
pyiceberg or another engine through MetaService's catalog.
"""

from __future__ import annotations

import time


def barrier_after(*latest: int | None) -> int:
    """The barrier to commit after the barriers ``latest`` (``None`` entries are ignored):
    ``max(now_ms, max(latest) + 1)``, so barriers follow the wall clock and never go back.

    Example::

        barrier = sp.barrier_after(previous_barrier)   # previous_barrier may be None
    """
    floor = max((int(b) for b in latest if b is not None), default=-1)
    return max(time.time_ns() // 1_000_000, floor + 1)


# A barrier before 2000-01-01 UTC is taken as a plain counter (tests, walk-throughs use 10, 20,
# 30), not as a time: the dashboard draws the same line.
WALL_CLOCK_FROM_MS = 946_684_800_000


def barrier_text(barrier: int | None, *, integer: bool = False) -> str:
    """A barrier as a person reads it, a UTC time to the millisecond:
    ``2026-11-27 23:05:10.250 UTC``; with ``integer=True`` followed by the barrier itself, as
    the API and the commands take it: ``2026-11-27 23:05:10.250 UTC (1795820710250)``.
    A barrier before 2000 is a plain counter and prints as its number; ``None`` as ``—``.
    (docs/concepts.md#barrier: a barrier is a time in milliseconds since 1970-01-01 UTC.)
    """
    if barrier is None:
        return "—"
    ms = int(barrier)
    if ms < WALL_CLOCK_FROM_MS:
        return str(ms)
    seconds, millis = divmod(ms, 1000)
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + f".{millis:03d} UTC"
    return f"{text} ({ms})" if integer else text
