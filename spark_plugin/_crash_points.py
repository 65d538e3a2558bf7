"""A test hook: kill the Spark driver at a named point of the streaming source or sink, or of
a batch job's commit.

Only for the exactly-once tests. Nothing happens unless ``METASERVICE_PLUGIN_CRASH_AT`` is set::

    METASERVICE_PLUGIN_CRASH_AT=<point>[@<n>]
    METASERVICE_PLUGIN_CRASH_PGID=<process group of the driver>   (optional)
    METASERVICE_PLUGIN_CRASH_LOG=<file>                            (optional)

``<point>`` is one of :data:`POINTS`. ``@<n>`` restricts the crash to Spark micro-batch ``n``
for the points that know their batch (sink and executor points); for ``after_offset`` it means
the n-th barrier handed out by that source in this run, and for ``after_sink_commit`` the
n-th sink committed in this run. At the point, the process sends SIGKILL
to the driver's process group when ``METASERVICE_PLUGIN_CRASH_PGID`` is set (the test starts the
driver as a session leader, so its Python process, the JVM and the Python workers die at once,
like a machine failure), then to itself. Just before, one line naming the point is appended to
``METASERVICE_PLUGIN_CRASH_LOG`` (the driver's stderr would lose it: Spark relays a worker's
stderr through the JVM, which dies first). No cleanup runs: that is the point.
"""

from __future__ import annotations

import contextlib
import os
import signal

CRASH_AT_ENV = "METASERVICE_PLUGIN_CRASH_AT"
CRASH_PGID_ENV = "METASERVICE_PLUGIN_CRASH_PGID"
CRASH_LOG_ENV = "METASERVICE_PLUGIN_CRASH_LOG"

POINTS = (
    "after_offset",            # source: the service pinned the barrier, Spark has not logged it
    "in_read",                 # executor: reading the data files of the barrier
    "in_write",                # executor: writing data files of the sink
    "before_iceberg_commit",   # sink commit: files written, nothing committed
    "after_iceberg_commit",    # sink commit: Iceberg holds the barrier, the service does not
    "after_report",            # sink commit: reported; Spark's commit log not written yet
    "source_commit",           # source: Spark logged the batch as committed
    "after_sink_commit",       # BarrierJob: a sink holds the barrier, the step's other sinks not
)

_hits: dict[str, int] = {}


def crash_point(name: str, batch_id: int | None = None) -> None:
    """SIGKILL the driver here if the environment asks for it (see the module docstring)."""
    spec = os.environ.get(CRASH_AT_ENV)
    if not spec:
        return
    point, _, at = spec.partition("@")
    if point.strip() != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if at:
        n = int(at)
        if (batch_id if batch_id is not None else _hits[name]) != n:
            return
    log = os.environ.get(CRASH_LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"metaservice crash point {name} (batch {batch_id}, pid {os.getpid()})\n")
    group = os.environ.get(CRASH_PGID_ENV)
    if group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(group), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
