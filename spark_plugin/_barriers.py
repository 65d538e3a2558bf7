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
