"""A pipeline's root fed by a real Kafka topic: Spark's own Kafka source → the ``metaservice``
sink, each micro-batch one barrier of the root table (a job without ``metaservice`` sources),
exactly once across SIGKILLs of the driver (JVM and Python workers included) at the sink's
crash points and at a moment nobody chose, each run restarted from its checkpoint.

Checked against the topic itself: every offset of every partition is in the table once, each
barrier's snapshot adds, per partition, the offsets right after the previous barrier's (none
skipped, none twice), and the service's barriers are the job's tagged Iceberg commits.
"""

from __future__ import annotations

import random
import signal
import time
import uuid
from typing import Any

import pytest

from spark_plugin import _iceberg as ice
from tests.spark_plugin.crash_runs import RUN_TIMEOUT, CrashPipeline
from tests.spark_plugin.exactly_once_driver import KAFKA_JARS
from tests.spark_plugin.streaming_support import wait_until

pytestmark = pytest.mark.spark

PARTITIONS = 2
FIRST_MESSAGES = 20  # 4 offsets per micro-batch: batches 0-4 before the last run
LAST_MESSAGES = 6    # produced while the last run is reading
# (crash point, micro-batch): the two points where a replay could commit a batch twice
CRASH_RUNS = [("after_iceberg_commit", 1), ("after_report", 2)]


def produce(kafka: Any, topic: str, values: range) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
    for value in values:
        producer.produce(topic, value=str(value).encode(), partition=value % PARTITIONS)
    assert producer.flush(30) == 0


def topic_offsets(kafka: Any, topic: str) -> set[tuple[int, int]]:
    """Every (partition, offset) the topic holds, from its watermarks."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"{topic}-check",
                         "log_level": 0})
    try:
        found = set()
        for partition in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=10)
            found |= {(partition, offset) for offset in range(low, high)}
        return found
    finally:
        consumer.close()


def rows_at(table: Any, snapshot_id: int) -> list[tuple[int, int, int]]:
    return [(r["partition"], r["offset"], r["id"])
            for r in table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()]


def run_until_killed(pipeline: CrashPipeline, crash_at: str | None,
                     kill_after_barriers: int | None = None) -> None:
    """A driver run ended by SIGKILL: at a crash point, or (``kill_after_barriers``) by the
    test, at a random moment once the sink has that many barriers."""
    pipeline.start(crash_at)
    deadline = time.monotonic() + RUN_TIMEOUT
    if kill_after_barriers is not None:
        wait_until(lambda: len(barriers_of(pipeline)) >= kill_after_barriers,
                   timeout=RUN_TIMEOUT)
        time.sleep(random.uniform(0, 1.5))
        pipeline.kill_leftovers()
    while pipeline.proc.poll() is None:
        assert time.monotonic() < deadline, f"no crash at {crash_at}:\n{pipeline.output()}"
        time.sleep(0.2)
    assert pipeline.proc.returncode == -signal.SIGKILL, pipeline.output()


def barriers_of(pipeline: CrashPipeline) -> list[dict[str, Any]]:
    try:
        return pipeline.client.table_barriers(pipeline.sink, limit=1000)["barriers"]
    except Exception:  # noqa: BLE001 - the job has not registered its sink yet
        return []


def test_every_kafka_offset_lands_in_exactly_one_barrier_across_driver_kills(
        catalog, database, client, live_server_url, kafka, tmp_path):
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    assert any(KAFKA_JARS.glob("spark-sql-kafka-*.jar")), "bash engines/kafka/install.sh"
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    sink = f"lake.{database}.orders"
    catalog.create_table((database, "orders"), schema=Schema(
        *[NestedField(i + 1, n, LongType(), required=False)
          for i, n in enumerate(("partition", "offset", "id"))]))
    pipeline = CrashPipeline(
        url=live_server_url, client=client, job=f"{database}.ingest-orders",
        source=f"kafka://{kafka.bootstrap}/{topic}", sink=sink, workdir=tmp_path,
        load=lambda table: ice.load_table(table, catalog),
        ingest=lambda *_: None)
    produce(kafka, topic, range(FIRST_MESSAGES))
    started = time.monotonic()
    try:
        for point, batch in CRASH_RUNS:
            run_until_killed(pipeline, f"{point}@{batch}")
            if point == "after_iceberg_commit":
                # the batch's barrier is in Iceberg, not yet on the service
                assert pipeline.iceberg_latest() != pipeline.sink_latest()
        run_until_killed(pipeline, None, kill_after_barriers=len(barriers_of(pipeline)) + 1)
        pipeline.start(None)
        produce(kafka, topic, range(FIRST_MESSAGES, FIRST_MESSAGES + LAST_MESSAGES))
        total = FIRST_MESSAGES + LAST_MESSAGES
        wait_until(lambda: sum(len(rows_at(t, t.current_snapshot().snapshot_id))
                               for t in [ice.load_table(sink, catalog)]
                               if t.current_snapshot() is not None) >= total,
                   timeout=RUN_TIMEOUT)
        (tmp_path / "stop").touch()
        assert pipeline.proc.wait(timeout=120) == 0, pipeline.output()
    finally:
        pipeline.kill_leftovers()
    elapsed = time.monotonic() - started

    table = ice.load_table(sink, catalog)
    recorded = sorted(barriers_of(pipeline), key=lambda b: b["barrier"])
    tagged = [(s, b) for s, j, b in ice.tagged_snapshots(table.metadata) if j == pipeline.job]
    assert [(b["snapshot_id"], b["barrier"]) for b in recorded] == tagged
    final = rows_at(table, table.current_snapshot().snapshot_id)
    assert len(final) == len(set(final)) == FIRST_MESSAGES + LAST_MESSAGES  # none twice
    assert {(p, o) for p, o, _ in final} == topic_offsets(kafka, topic)      # none lost
    assert sorted(i for _, _, i in final) == list(range(FIRST_MESSAGES + LAST_MESSAGES))
    # Each barrier adds, per partition, the offsets right after the previous barrier's.
    before: set[tuple[int, int, int]] = set()
    next_offset = dict.fromkeys(range(PARTITIONS), 0)
    for entry in recorded:
        now = set(rows_at(table, entry["snapshot_id"]))
        assert before < now, entry
        for partition in range(PARTITIONS):
            added = sorted(o for p, o, _ in now - before if p == partition)
            assert added == list(range(next_offset[partition],
                                       next_offset[partition] + len(added))), entry
            next_offset[partition] += len(added)
        before = now
    assert client.get_job(pipeline.job)["state"] == "terminated"
    print(f"\nKafka root: {pipeline.runs} driver runs, {len(recorded)} barriers, "
          f"{elapsed:.0f} s")
