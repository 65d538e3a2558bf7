"""Structured Streaming through Apache Iceberg's own Spark 4.1 runtime and the catalog, on the
standalone cluster of the Spark 4.1 route (``spark41_cluster``: a master and two workers of one
core each), the driver a process of its own (``tests/engines/spark41/streaming_driver.py``)
killed with SIGKILL in the middle of its run and started again from its checkpoint.

- Iceberg's sink (``writeStream.format("iceberg").toTable("lake.db.root")``) into a root
  table: each micro-batch is one Iceberg commit, and the catalog assigns each commit a barrier
  of its own in the same transaction. After the restart, every input row is in the table once
  and each of the query's commits completed exactly one barrier: a batch Spark replays after
  the crash is not committed twice (Iceberg's sink skips an epoch its query already committed).
- Iceberg's source (``readStream.format("iceberg")``) on a job's sink: it yields the rows
  each appended snapshot added, oldest first, from the table's first snapshot on: the job's
  barriers one after the other, each once, across a restart. It follows the head, not a read
  session's cut, and it reads appends only: a snapshot that rewrites or deletes rows (a step
  that overwrites the sink) fails the query (unless ``streaming-skip-overwrite-snapshots`` /
  ``…-delete-snapshots``, Iceberg's options, which then leave its changes unread).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from metaservice_soak.spark_cluster import DRIVER_SETTINGS, StandaloneCluster
from tests.conftest import ServerThread, missing
from tests.engines.spark41.rig import INSTALL, PYTHON, RUNTIME
from tests.metaservice.catalog.test_pyiceberg import barriers
from tests.metaservice.jobs.test_jobs import plan

pytestmark = [pytest.mark.spark_jvm, pytest.mark.backends("postgresql")]

DRIVER = Path(__file__).resolve().parents[2] / "engines" / "spark41" / "streaming_driver.py"
RUN_TIMEOUT = 480.0  # seconds for a driver's run: a cold JVM and the cluster's executors, on a
# machine where the soak runs beside it (a run of 240 s was cut short in CI; alone it takes ~50 s)
ROWS = pa.schema([pa.field("id", pa.int64()), pa.field("batch", pa.int64())])


def wait_for(condition: Callable[[], bool], timeout: float, what: str,
             driver: Driver | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if driver is not None and driver.process.poll() is not None:
            raise AssertionError(f"the driver exited ({driver.process.returncode}) before "
                                 f"{what}:\n{driver.log_tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout}s"
                                 + (f":\n{driver.log_tail()}" if driver else ""))
        time.sleep(0.05)


class Driver:
    """One run of the streaming driver in a process group of its own."""

    def __init__(self, config: Path, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
        env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=str(PYTHON))
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [str(PYTHON), str(DRIVER), str(config)], env=env, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def kill(self) -> None:
        """SIGKILL to the whole process group: the Python driver and its JVM."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self, stop_file: Path) -> None:
        stop_file.touch()
        try:
            assert self.process.wait(timeout=120) == 0, self.log_tail()
        finally:
            stop_file.unlink()


class Runs:
    """The streaming driver's runs of one test: on the cluster, against the test's server."""

    def __init__(self, cluster: StandaloneCluster, server: ServerThread, workdir: Path) -> None:
        self.cluster, self.server, self.workdir = cluster, server, workdir
        self.stop_file = workdir / "stop"
        self.drivers: list[Driver] = []

    def config(self, **values: Any) -> Path:
        path = self.workdir / f"config-{values['mode']}.json"
        path.write_text(json.dumps({
            "master": self.cluster.master_url, "jars": [str(RUNTIME)],
            "settings": DRIVER_SETTINGS, "catalog_uri": f"{self.server.url}/iceberg",
            "stop_file": str(self.stop_file), **values}))
        return path

    def start(self, config: Path) -> Driver:
        driver = Driver(config, self.workdir / "driver.log")
        self.drivers.append(driver)
        return driver

    def wait_until_gone(self) -> None:
        """The master has removed a killed driver's application: its executors are gone and
        both workers' cores are free for the next run."""
        wait_for(lambda: not self.cluster.status()["activeapps"], 60,
                 "the killed application removed")


@pytest.fixture
def runs(spark41_cluster: StandaloneCluster, server: ServerThread,
         tmp_path: Path) -> Iterator[Runs]:
    """No run of the driver outlives the test."""
    for path in (PYTHON, RUNTIME):
        if not path.exists():
            missing(f"{path} is missing (set it up with: bash {INSTALL})",
                    required_by="METASERVICE_REQUIRE_SPARK_JVM")
    runs = Runs(spark41_cluster, server, tmp_path)
    yield runs
    for driver in runs.drivers:
        if driver.process.poll() is None:
            driver.kill()


def test_iceberg_streaming_sink_commits_each_batch_at_one_barrier_across_a_killed_driver(
        runs: Runs, catalog: RestCatalog, client: httpx.Client, tmp_path: Path) -> None:
    catalog.create_namespace("db")
    catalog.create_table("db.root", schema=ROWS)
    source = tmp_path / "input"
    source.mkdir()
    files = 6
    for number in range(files):  # one file per micro-batch, taken oldest first
        path = source / f"part-{number}.json"
        path.write_text("".join(json.dumps({"id": 10 * number + k, "batch": number}) + "\n"
                                for k in range(3)))
        os.utime(path, (1_700_000_000 + number, 1_700_000_000 + number))
    checkpoint = tmp_path / "checkpoint"
    config = runs.config(mode="sink", input=str(source), table="lake.db.root",
                         checkpoint=str(checkpoint))

    first = runs.start(config)
    wait_for(lambda: len(barriers(client, "lake.db.root")) >= 2, RUN_TIMEOUT,
             "two micro-batches committed", first)
    first.kill()
    committed = len(barriers(client, "lake.db.root"))

    def logged(log: str) -> list[int]:
        return sorted(int(p.name) for p in (checkpoint / log).iterdir() if p.name.isdigit())

    print(f"killed after {committed} Iceberg commits; Spark's offsets log: {logged('offsets')}, "
          f"its commit log: {logged('commits')}")
    assert 2 <= committed < files
    last = logged("commits")[-1]
    if logged("offsets")[-1] == last == committed - 1:
        # The kill came after Spark's own commit log of the last batch, as it mostly does (the
        # window between Iceberg's commit and that log is a few milliseconds): its last entry
        # goes, which leaves the checkpoint as a kill inside that window leaves it. Spark then
        # runs that batch again, and Iceberg's sink must not commit it twice.
        for entry in (checkpoint / "commits" / str(last), checkpoint / "commits" / f".{last}.crc"):
            entry.unlink(missing_ok=True)
        print(f"batch {last} committed to Iceberg, not in Spark's commit log: replayed")
    runs.wait_until_gone()

    second = runs.start(config)
    wait_for(lambda: (checkpoint / "commits" / str(files - 1)).exists(), RUN_TIMEOUT,
             "every file's micro-batch committed", second)
    second.stop(runs.stop_file)

    table = catalog.load_table("db.root")
    ids = sorted(table.scan().to_arrow()["id"].to_pylist())
    assert ids == sorted(10 * n + k for n in range(files) for k in range(3))  # each once
    snapshots = table.snapshots()
    summaries = [s.summary.additional_properties for s in snapshots]  # type: ignore[union-attr]
    assert sorted(int(s["spark.sql.streaming.epochId"]) for s in summaries) == list(range(files))
    assert len({s["spark.sql.streaming.queryId"] for s in summaries}) == 1  # one query, resumed
    recorded = barriers(client, "lake.db.root")  # newest first
    assert [snapshot for _, snapshot, _ in reversed(recorded)] == [
        s.snapshot_id for s in snapshots]  # each commit completed one barrier, in commit order
    assert all(job is None for _, _, job in recorded)
    assert len({barrier for barrier, _, _ in recorded}) == files


def test_iceberg_streaming_source_reads_each_barrier_of_a_jobs_sink_once_across_a_killed_driver(
        runs: Runs, catalog: RestCatalog, client: httpx.Client, tmp_path: Path) -> None:
    catalog.create_namespace("db")
    events = catalog.create_table("db.events", schema=ROWS)
    copies = catalog.create_table("db.copies", schema=ROWS)
    plan(client, "copy", ["lake.db.events"], ["lake.db.copies"])

    def commit_barrier(number: int) -> None:
        """Barrier ``100 * number``: its root rows, then the job's copy of them (one appended
        snapshot of one data file in the sink)."""
        barrier = 100 * number
        rows = pa.table({"id": [10 * number + k for k in range(2)], "batch": [number] * 2},
                        schema=ROWS)
        events.append(rows, snapshot_properties={"metaservice.barrier": str(barrier)})
        answer = (client.post("/jobs/copy/start", json={"from": "latest"}) if number == 1 else
                  client.post("/jobs/copy/barriers/next", json={"after": barrier - 100}))
        assert answer.json()["barrier"] == barrier, answer.text
        copies.append(rows, snapshot_properties={"metaservice.job": "copy",
                                                 "metaservice.barrier": str(barrier)})

    for number in (1, 2, 3):
        commit_barrier(number)
    output = tmp_path / "output"
    output.mkdir()
    config = runs.config(mode="source", table="lake.db.copies", output=str(output),
                         checkpoint=str(tmp_path / "checkpoint"))

    def batches() -> dict[int, list[list[int]]]:
        return {int(p.stem.removeprefix("batch-")): json.loads(p.read_text())
                for p in output.glob("batch-*.json")}

    first = runs.start(config)
    wait_for(lambda: len(batches()) >= 1, RUN_TIMEOUT, "a micro-batch written", first)
    first.kill()
    print(f"killed after micro-batches {sorted(batches())}")
    assert len(batches()) < 3
    runs.wait_until_gone()
    for number in (4, 5):  # committed while the reader is down
        commit_barrier(number)

    second = runs.start(config)
    wait_for(lambda: sum(len(rows) for rows in batches().values()) >= 10, RUN_TIMEOUT,
             "every barrier's rows read", second)
    commit_barrier(6)  # and one while it runs
    wait_for(lambda: sum(len(rows) for rows in batches().values()) >= 12, RUN_TIMEOUT,
             "the new barrier's rows read", second)
    read = batches()

    # A step that rewrites the sink (here pyiceberg's overwrite at barrier 700): not an
    # append, and Iceberg's source stops the query (without streaming-skip-*-snapshots).
    events.append(pa.table({"id": [70], "batch": [7]}, schema=ROWS),
                  snapshot_properties={"metaservice.barrier": "700"})
    answer = client.post("/jobs/copy/barriers/next", json={"after": 600})
    assert answer.json()["barrier"] == 700, answer.text
    copies.overwrite(pa.table({"id": [70], "batch": [7]}, schema=ROWS),
                     snapshot_properties={"metaservice.job": "copy", "metaservice.barrier": "700"})
    assert second.process.wait(timeout=RUN_TIMEOUT) == 3, second.log_tail()
    assert re.search(r"Cannot process (overwrite|delete) snapshot", second.log.read_text()), (
        second.log_tail())
    assert batches() == read  # nothing of the rewrite was read
    # One micro-batch per snapshot, in commit order: barrier n's rows in the n-th batch, once.
    assert [sorted({b for _, b in read[batch]}) for batch in sorted(read)] == [
        [n] for n in range(1, 7)], read
    assert sorted(i for rows in read.values() for i, _ in rows) == sorted(
        10 * n + k for n in range(1, 7) for k in range(2))
