"""Exactly once, proven by killing the Spark driver (SIGKILL, JVM and Python workers included)
at five points of the streaming source and sink, and restarting it from its checkpoint
(tests/spark_plugin/crash_runs.py runs the driver and checks the sink).

The catalog here is an external one (pyiceberg's SQL catalog): a commit and its report to the
service are two steps, so a crash can fall between them.
"""

from __future__ import annotations

import time

import pyarrow.compute as pc
import pytest

from spark_plugin import _iceberg as ice
from tests.spark_plugin.crash_runs import CrashPipeline, create_tables
from tests.spark_plugin.streaming_support import ingest

pytestmark = pytest.mark.spark

# (crash point, micro-batch) per run; a string batch: the point's own count (see crash_points).
CRASH_RUNS = [
    ("after_iceberg_commit", 1),   # Iceberg holds the barrier, the service does not
    ("after_report", 2),           # the service holds it, Spark's commit log does not
    ("before_iceberg_commit", 3),  # data files written, nothing committed
    ("in_write", 4),               # an executor task dies while writing
    ("after_offset", "2"),         # the barrier is pinned, Spark has not logged the offset
]


def _crash_pipeline(catalog, database, client, url, workdir, job, source_format):
    """The tables ``events`` → ``events_out`` and the driver of a query between them."""
    create_tables(catalog, database, ("events", "events_out"))
    source, sink = f"lake.{database}.events", f"lake.{database}.events_out"
    pipeline = CrashPipeline(
        url=url, client=client, job=f"{database}.{job}", source=source, sink=sink,
        workdir=workdir, load=lambda table: ice.load_table(table, catalog),
        ingest=lambda table, rows, barrier: ingest(client, catalog, table, rows, barrier),
        source_format=source_format)
    return source, sink, pipeline


def test_every_barrier_committed_exactly_once_across_driver_kills(
        catalog, database, client, live_server_url, tmp_path):
    source, sink, pipeline = _crash_pipeline(catalog, database, client, live_server_url,
                                             tmp_path, "exactly-once", "metaservice")
    pipeline.ingest_next()
    started = time.monotonic()
    timings: list[str] = []
    try:
        for point, batch in CRASH_RUNS:
            run_started = time.monotonic()
            pipeline.crash(point, batch)
            timings.append(f"{point}: {time.monotonic() - run_started:.0f} s")
            if point == "after_iceberg_commit":
                # the crash left the barrier in Iceberg but not on the service
                assert pipeline.iceberg_latest() == pipeline.barriers[-1] != pipeline.sink_latest()
            if point == "after_report":
                # the service and Iceberg agree on the crashed batch's barrier (the pipeline may
                # have ingested the next one between the report and the kill)
                latest = pipeline.sink_latest()
                assert pipeline.iceberg_latest() == latest and latest in pipeline.barriers[-2:]
                assert not (tmp_path / "checkpoint" / "commits" / str(batch)).exists()
        pipeline.finish(more_barriers=1)
    finally:
        pipeline.kill_leftovers()
    elapsed = time.monotonic() - started

    pipeline.check_exactly_once()
    all_rows = ice.load_table(source, catalog).scan().to_arrow().to_pylist()
    assert pc.sum(ice.load_table(sink, catalog).scan().to_arrow()["amount"]).as_py() == sum(
        r["amount"] * 2 + 1 for r in all_rows)
    print(f"\nexactly-once: {len(CRASH_RUNS)} SIGKILLs, {pipeline.runs} driver runs, "
          f"{len(pipeline.barriers)} barriers, {elapsed:.0f} s ({', '.join(timings)})")


# the metaservice_native source: its offsets and commits are the metaservice source's, asked
# through Py4J from the driver's JVM; the kills fall in the driver's Python process, mid-call
# (the sink's points are the sink's own, above)
NATIVE_CRASH_RUNS = [
    ("after_offset", "2"),         # the barrier is pinned, Spark has not logged the offset
    ("source_commit", "2"),        # Spark logged the commit, the source has not heard of it
]


def test_native_source_commits_every_barrier_exactly_once_across_driver_kills(
        catalog, database, client, live_server_url, tmp_path):
    source, sink, pipeline = _crash_pipeline(catalog, database, client, live_server_url,
                                             tmp_path, "native-once", "metaservice_native")
    pipeline.ingest_next()
    try:
        for point, batch in NATIVE_CRASH_RUNS:
            pipeline.crash(point, batch)
        pipeline.finish(more_barriers=1)
    finally:
        pipeline.kill_leftovers()
    pipeline.check_exactly_once()
    all_rows = ice.load_table(source, catalog).scan().to_arrow().to_pylist()
    assert pc.sum(ice.load_table(sink, catalog).scan().to_arrow()["amount"]).as_py() == sum(
        r["amount"] * 2 + 1 for r in all_rows)
