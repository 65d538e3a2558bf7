"""Exactly once, proven by killing the Spark driver (SIGKILL, JVM and Python workers included)
at five points of the streaming source and sink, and restarting it from its checkpoint.

One job reads a root table and writes a sink through the ``metaservice`` format. The test
ingests one barrier at a time and runs the driver (``exactly_once_driver.py``) in its own
process group, each run with a different crash point armed for a micro-batch that holds a new
barrier; the next run restarts from the checkpoint. In the end every barrier of the root appears
exactly once in the sink (on the service and among the sink's Iceberg commits), and the sink,
at every barrier, equals a batch recomputation of the root rows up to that barrier.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

import spark_plugin as sp
from spark_plugin import _iceberg as ice
from tests.spark_plugin.streaming_support import ingest, wait_until

pytestmark = pytest.mark.spark

DRIVER = Path(__file__).with_name("exactly_once_driver.py")
ROOT = Path(__file__).resolve().parents[2]

# (crash point, micro-batch) per run; ``None`` batch: the point's own count (see crash_points).
CRASH_RUNS = [
    ("after_iceberg_commit", 2),   # Iceberg holds the barrier, the service does not
    ("after_report", 4),           # the service holds it, Spark's commit log does not
    ("before_iceberg_commit", 6),  # data files written, nothing committed
    ("in_write", 8),               # an executor task dies while writing
    ("after_offset", "2"),         # the barrier is pinned, Spark has not logged the offset
]
RUN_TIMEOUT = 300  # seconds per driver run: a cold JVM and Python workers on a busy 2-core box


class Driver:
    def __init__(self, url: str, job: str, source: str, sink: str, workdir: Path) -> None:
        self.args = [sys.executable, str(DRIVER), url, job, source, sink,
                     str(workdir / "checkpoint"), str(workdir / "stop")]
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

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

    def crashes(self) -> str:
        path = self.workdir / "crashes.log"
        return path.read_text() if path.exists() else ""

    def kill_leftovers(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)


def root_rows(i: int) -> dict[str, list[int]]:
    """Rows of the i-th barrier: two or three rows with ids unique across barriers."""
    ids = [10 * i + k for k in range(2 + i % 2)]
    return {"id": ids, "amount": [x * 7 % 100 for x in ids], "batch": [i] * len(ids)}


def transform(rows: list[dict]) -> list[tuple[int, int, int]]:
    return sorted((r["id"], r["amount"] * 2 + 1, r["batch"]) for r in rows)


def test_every_barrier_committed_exactly_once_across_driver_kills(
        catalog, database, client, live_server_url, tmp_path):
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    source, sink = f"lake.{database}.events", f"lake.{database}.events_out"
    schema = Schema(*[NestedField(i + 1, n, LongType(), required=False)
                      for i, n in enumerate(("id", "amount", "batch"))])
    for t in (source, sink):
        catalog.create_table((database, t.rsplit(".", 1)[1]), schema=schema)
    job = f"{database}.exactly-once"
    driver = Driver(live_server_url, job, source, sink, tmp_path)
    barriers: list[int] = []

    def ingest_next() -> None:
        i = len(barriers) + 1
        barrier = 1_000 * i
        ingest(client, catalog, source, root_rows(i), barrier)
        barriers.append(barrier)

    def sink_latest() -> int | None:
        try:
            return client.table_barriers(sink, limit=1).get("latest_barrier")
        except sp.UnknownTableError:
            return None

    def iceberg_latest() -> int | None:
        tagged = ice.tagged_snapshots(ice.load_table(sink, catalog).metadata)
        return tagged[-1][2] if tagged else None

    ingest_next()
    started = time.monotonic()
    timings: list[str] = []
    try:
        for point, batch in CRASH_RUNS:
            run_started = time.monotonic()
            driver.start(f"{point}@{batch}")
            deadline = time.monotonic() + RUN_TIMEOUT
            while driver.proc.poll() is None:
                assert time.monotonic() < deadline, f"no crash at {point}:\n{driver.output()}"
                if sink_latest() == barriers[-1]:
                    ingest_next()
                time.sleep(0.2)
            assert driver.proc.returncode == -signal.SIGKILL, driver.output()
            assert f"metaservice crash point {point}" in driver.crashes().splitlines()[-1]
            timings.append(f"{point}: {time.monotonic() - run_started:.0f} s")
            if point == "after_iceberg_commit":
                # the crash left the barrier in Iceberg but not on the service
                assert iceberg_latest() == barriers[-1] != sink_latest()
            if point == "after_report":
                # the service and Iceberg agree on the crashed batch's barrier (the loop may have
                # ingested the next one between the report and the kill)
                latest = sink_latest()
                assert iceberg_latest() == latest and latest in barriers[-2:]
                assert not (tmp_path / "checkpoint" / "commits" / str(batch)).exists()
        # a last run without crash catches up, takes two more barriers and stops cleanly
        driver.start(None)
        for _ in range(2):
            wait_until(lambda: sink_latest() == barriers[-1], timeout=RUN_TIMEOUT)
            ingest_next()
        wait_until(lambda: sink_latest() == barriers[-1], timeout=RUN_TIMEOUT)
        (tmp_path / "stop").touch()
        assert driver.proc.wait(timeout=120) == 0, driver.output()
    finally:
        driver.kill_leftovers()
    elapsed = time.monotonic() - started

    # every barrier exactly once: on the service, and among the sink's Iceberg commits
    recorded = client.table_barriers(sink, limit=1000)["barriers"]
    assert sorted(b["barrier"] for b in recorded) == barriers
    table = ice.load_table(sink, catalog)
    tagged = ice.tagged_snapshots(table.metadata)
    assert [b for _, j, b in tagged if j == job] == barriers
    # the sink equals a batch recomputation of the same input, at every barrier
    root = ice.load_table(source, catalog)
    all_rows = root.scan().to_arrow().to_pylist()
    for entry in recorded:
        i = entry["barrier"] // 1_000
        at_barrier = table.scan(snapshot_id=entry["snapshot_id"]).to_arrow()
        expected = transform([r for r in all_rows if r["batch"] <= i])
        assert sorted(tuple(r.values()) for r in at_barrier.to_pylist()) == expected, i
    assert pc.sum(table.scan().to_arrow()["amount"]).as_py() == sum(
        r["amount"] * 2 + 1 for r in all_rows)
    assert client.get_job(job)["state"] == "terminated"
    print(f"\nexactly-once: {len(CRASH_RUNS)} SIGKILLs, {driver.runs} driver runs, "
          f"{len(barriers)} barriers, {elapsed:.0f} s ({', '.join(timings)})")
