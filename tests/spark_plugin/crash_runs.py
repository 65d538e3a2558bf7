"""Runs of the streaming job killed at a crash point (SIGKILL, JVM and Python workers included)
and restarted from its checkpoint, shared by the exactly-once tests of each catalog.

One job reads a root table and writes a sink through the ``metaservice`` format. The pipeline
ingests one barrier at a time and runs the driver (``exactly_once_driver.py``) in its own
process group, each run with a crash point armed for a micro-batch; the next run restarts from
the checkpoint. :meth:`CrashPipeline.check_exactly_once` then proves every root barrier is in the
sink exactly once (on the service and among the sink's Iceberg commits) and that the sink, at
every barrier, equals a batch recomputation of the root rows up to that barrier.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import spark_plugin as sp
from spark_plugin import _iceberg as ice
from tests.spark_plugin.streaming_support import wait_until

DRIVER = Path(__file__).with_name("exactly_once_driver.py")
ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 300  # seconds per driver run: a cold JVM and Python workers on a busy 2-core box
COLUMNS = ("id", "amount", "batch")


def create_tables(catalog: Any, database: str, names: tuple[str, ...]) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    schema = Schema(*[NestedField(i + 1, n, LongType(), required=False)
                      for i, n in enumerate(COLUMNS)])
    for table in names:
        catalog.create_table((database, table), schema=schema)


def root_rows(i: int) -> dict[str, list[int]]:
    """Rows of the i-th barrier: two or three rows with ids unique across barriers."""
    ids = [10 * i + k for k in range(2 + i % 2)]
    return {"id": ids, "amount": [x * 7 % 100 for x in ids], "batch": [i] * len(ids)}


def transform(rows: list[dict]) -> list[tuple[int, int, int]]:
    """What the driver's job computes from root rows (see exactly_once_driver.py)."""
    return sorted((r["id"], r["amount"] * 2 + 1, r["batch"]) for r in rows)


class CrashPipeline:
    """The driver process, the root barriers ingested so far and the sink's state."""

    def __init__(self, *, url: str, client: sp.MetaServiceClient, job: str, source: str,
                 sink: str, workdir: Path, ingest: Callable[[str, dict, int], object],
                 load: Callable[[str], Any], source_format: str = "metaservice") -> None:
        self.args = [sys.executable, str(DRIVER), url, job, source, sink,
                     str(workdir / "checkpoint"), str(workdir / "stop"), source_format]
        self.client, self.job, self.source, self.sink = client, job, source, sink
        self.workdir = workdir
        self._ingest, self._load = ingest, load
        self.barriers: list[int] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    # -- the root ---------------------------------------------------------------------------

    def ingest_next(self) -> None:
        i = len(self.barriers) + 1
        self._ingest(self.source, root_rows(i), 1_000 * i)
        self.barriers.append(1_000 * i)

    def sink_latest(self) -> int | None:
        """The sink's latest barrier on the service."""
        try:
            return self.client.table_barriers(self.sink, limit=1).get("latest_barrier")
        except sp.UnknownTableError:
            return None

    def iceberg_latest(self) -> int | None:
        """The barrier of the sink's newest tagged Iceberg snapshot."""
        tagged = ice.tagged_snapshots(self._load(self.sink).metadata)
        return tagged[-1][2] if tagged else None

    # -- the driver -------------------------------------------------------------------------

    def start(self, crash_at: str | None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("METASERVICE_PLUGIN")}
        if crash_at:
            env["METASERVICE_PLUGIN_CRASH_AT"] = crash_at
            env["METASERVICE_PLUGIN_CRASH_LOG"] = str(self.workdir / "crashes.log")
        env["PYTHONPATH"] = str(ROOT)
        self.runs += 1
        self.log = self.workdir / f"run-{self.runs}.log"
        with open(self.log, "wb") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(self.args, env=env, cwd=ROOT, start_new_session=True,
                                         stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def crash(self, point: str, batch: int | str) -> None:
        """Run the driver until it kills itself at ``point`` in micro-batch ``batch``, feeding
        the root a new barrier whenever the sink has caught up."""
        self.start(f"{point}@{batch}")
        deadline = time.monotonic() + RUN_TIMEOUT
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, f"no crash at {point}:\n{self.output()}"
            if self.sink_latest() == self.barriers[-1]:
                self.ingest_next()
            time.sleep(0.2)
        assert self.proc.returncode == -signal.SIGKILL, self.output()
        crashes = (self.workdir / "crashes.log").read_text().splitlines()
        assert f"metaservice crash point {point}" in crashes[-1]

    def finish(self, more_barriers: int) -> None:
        """A last run without a crash: it catches up, takes ``more_barriers`` new barriers and
        stops cleanly."""
        self.start(None)
        for _ in range(more_barriers):
            wait_until(lambda: self.sink_latest() == self.barriers[-1], timeout=RUN_TIMEOUT)
            self.ingest_next()
        wait_until(lambda: self.sink_latest() == self.barriers[-1], timeout=RUN_TIMEOUT)
        (self.workdir / "stop").touch()
        assert self.proc.wait(timeout=120) == 0, self.output()

    def kill_leftovers(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    # -- the proof --------------------------------------------------------------------------

    def check_exactly_once(self) -> None:
        recorded = self.client.table_barriers(self.sink, limit=1000)["barriers"]
        assert sorted(b["barrier"] for b in recorded) == self.barriers
        table = self._load(self.sink)
        tagged = ice.tagged_snapshots(table.metadata)
        assert [b for _, j, b in tagged if j == self.job] == self.barriers
        all_rows = self._load(self.source).scan().to_arrow().to_pylist()
        for entry in recorded:
            i = entry["barrier"] // 1_000
            at_barrier = table.scan(snapshot_id=entry["snapshot_id"]).to_arrow().to_pylist()
            expected = transform([r for r in all_rows if r["batch"] <= i])
            assert sorted(tuple(r.values()) for r in at_barrier) == expected, i
        assert self.client.get_job(self.job)["state"] == "terminated"
