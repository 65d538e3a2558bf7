"""The sink's driver-side commit of micro-batches (``MicroBatchCommit``) against the real server
and a real Iceberg catalog, with Spark's offset log written by hand: the cases a live query
only reaches by timing (sources of one job ending a batch at different barriers, replays of a
committed batch, a replay after the job was unregistered)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from spark_plugin import _iceberg as ice
from spark_plugin.streaming.checkpoint import staged_output
from spark_plugin.streaming.options import SinkOptions
from spark_plugin.streaming.sink import MicroBatchCommit
from tests.spark_plugin.streaming_support import ingest

pytestmark = pytest.mark.iceberg


@pytest.fixture
def setup(catalog, database, client, live_server_url, tmp_path):
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    schema = Schema(NestedField(1, "id", LongType(), required=False))
    names = {n: f"lake.{database}.{n}" for n in ("left", "right", "out")}
    for n in names:
        catalog.create_table((database, n), schema=schema)
    job = f"{database}.join"
    client.register_source(job, names["left"])
    client.register_source(job, names["right"])
    client.register_sink(job, names["out"])
    checkpoint = tmp_path / "ckpt"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text('{"id":"query-1"}')
    options = SinkOptions.parse({"metaservice.url": live_server_url, "job": job,
                                 "table": names["out"], "checkpointLocation": str(checkpoint)})
    return names, job, checkpoint, options


def log_batch(checkpoint, batch: int, job: str, *positions: tuple[int, dict]) -> None:
    lines = ["v1", "{}"] + [json.dumps({"job": job, "barrier": b, "snapshots": s})
                            for b, s in positions]
    (checkpoint / "offsets" / str(batch)).write_text("\n".join(lines))


def files(catalog, table: str, ids: list[int]):
    tbl = ice.load_table(table, catalog)
    return ice.data_files_from_arrow(tbl, pa.table({"id": pa.array(ids, pa.int64())}))


def ids_at(catalog, table: str, snapshot_id: int | None = None) -> list[int]:
    data = ice.load_table(table, catalog).scan(snapshot_id=snapshot_id).to_arrow()
    return sorted(data["id"].to_pylist())


def test_a_batch_whose_sources_disagree_is_staged_and_committed_with_the_next_barrier(
        catalog, client, setup):
    names, job, checkpoint, options = setup
    left1 = ingest(client, catalog, names["left"], {"id": [1]}, 1_000)
    right1 = ingest(client, catalog, names["right"], {"id": [2]}, 1_000)
    at_1000 = {names["left"]: left1, names["right"]: right1}
    assert client.start_job(job).barrier == 1_000
    log_batch(checkpoint, 0, job, (1_000, at_1000), (1_000, at_1000))
    MicroBatchCommit(options, False, files(catalog, names["out"], [1, 2]), 0).run()
    assert client.table_barriers(names["out"], limit=1)["latest_barrier"] == 1_000

    left2 = ingest(client, catalog, names["left"], {"id": [3]}, 2_000)
    right2 = ingest(client, catalog, names["right"], {"id": [4]}, 2_000)
    at_2000 = {names["left"]: left2, names["right"]: right2}
    assert client.next_barrier(job, 1_000).barrier == 2_000
    # batch 1: the left source asked before barrier 2000 was pinned, the right one after
    log_batch(checkpoint, 1, job, (1_000, at_1000), (2_000, at_2000))
    MicroBatchCommit(options, False, files(catalog, names["out"], [4]), 1).run()
    assert client.table_barriers(names["out"], limit=1)["latest_barrier"] == 1_000
    assert ids_at(catalog, names["out"]) == [1, 2]
    assert [b for b, _ in staged_output(str(checkpoint), job, 10)] == [1]
    # batch 2: the left source caught up; barrier 2000 holds both batches' rows, one snapshot
    log_batch(checkpoint, 2, job, (2_000, at_2000), (2_000, at_2000))
    MicroBatchCommit(options, False, files(catalog, names["out"], [3]), 2).run()
    history = client.table_barriers(names["out"])["barriers"]
    assert [h["barrier"] for h in history] == [2_000, 1_000]
    assert ids_at(catalog, names["out"], history[0]["snapshot_id"]) == [1, 2, 3, 4]
    assert staged_output(str(checkpoint), job, 10) == []
    # a replay of batch 2 (crash before Spark's commit log) commits nothing and deletes its files
    again = files(catalog, names["out"], [3])
    MicroBatchCommit(options, False, again, 2).run()
    table = ice.load_table(names["out"], catalog)
    assert [b for _, _, b in ice.tagged_snapshots(table.metadata)] == [1_000, 2_000]
    assert not table.io.new_input(again[0].file_path).exists()


def test_a_replayed_batch_of_an_unregistered_job_restarts_it_at_that_barrier(
        catalog, client, setup):
    names, job, checkpoint, options = setup
    left1 = ingest(client, catalog, names["left"], {"id": [1]}, 1_000)
    right1 = ingest(client, catalog, names["right"], {"id": [2]}, 1_000)
    ingest(client, catalog, names["left"], {"id": [5]}, 3_000)
    ingest(client, catalog, names["right"], {"id": [6]}, 3_000)
    at_1000 = {names["left"]: left1, names["right"]: right1}
    client.start_job(job, 3_000)
    # the query was stopped in the middle of the batch of barrier 1000 (an earlier pin), its job
    # unregistered and planned again; Spark replays the batch from its offset log
    client.unregister(job)
    for t in ("left", "right"):
        client.register_source(job, names[t])
    client.register_sink(job, names["out"])
    log_batch(checkpoint, 0, job, (1_000, at_1000), (1_000, at_1000))
    MicroBatchCommit(options, False, files(catalog, names["out"], [1, 2]), 0).run()
    assert client.get_job(job)["state"] == "running"
    entry = client.table_barriers(names["out"], limit=1)["barriers"][0]
    assert entry["barrier"] == 1_000
    assert ids_at(catalog, names["out"], entry["snapshot_id"]) == [1, 2]
