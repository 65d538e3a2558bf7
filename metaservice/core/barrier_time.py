"""Barriers as a person reads them (docs/concepts.md#barrier): a barrier is a time in
milliseconds since 1970-01-01 UTC, printed as ``2026-11-27 23:05:10.250 UTC``. The server's
command line prints them so; the API keeps the integers. (The plugin, which imports nothing of
the server, has the same function, ``spark_plugin.barrier_text``; a test keeps them equal.)
"""

from __future__ import annotations

from datetime import UTC, datetime

# A barrier before 2000-01-01 UTC is taken as a plain counter (tests and walk-throughs use 10,
# 20, 30), not as a time: the dashboard draws the same line.
WALL_CLOCK_FROM_MS = 946_684_800_000


def barrier_text(barrier: int | None, *, integer: bool = False) -> str:
    """``2026-11-27 23:05:10.250 UTC``; with ``integer=True`` followed by the barrier as the API
    and the commands take it, ``2026-11-27 23:05:10.250 UTC (1795820710250)``. A barrier before
    2000 prints as its number, ``None`` as ``—``."""
    if barrier is None:
        return "—"
    ms = int(barrier)
    if ms < WALL_CLOCK_FROM_MS:
        return str(ms)
    seconds, millis = divmod(ms, 1000)
    text = (datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")
            + f".{millis:03d} UTC")
    return f"{text} ({ms})" if integer else text
