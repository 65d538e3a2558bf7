"""Root ingestion against the real server: append_root, replays, lost reports, heartbeats."""

from __future__ import annotations

import time

import pytest

import spark_plugin as sp
from spark_plugin import _iceberg as ice

pytestmark = pytest.mark.spark


def batch(spark, ids: list[int]):
    return spark.createDataFrame([(i, float(i)) for i in ids], "id long, amount double")


@pytest.fixture
def root(spark, catalog, database) -> str:
    name = f"lake.{database}.orders"
    sp.create_table_from_spark_schema(name, batch(spark, [0]).schema, catalog=catalog)
    return name


def tagged(catalog, name: str) -> list[tuple[int, str, int]]:
    return ice.tagged_snapshots(ice.load_table(name, catalog).metadata)


def test_append_root_commits_one_tagged_snapshot_and_reports_it(spark, catalog, client, root):
    before = int(time.time() * 1000)
    commit = sp.append_root(spark, batch(spark, [1, 2, 3]), root, client=client, catalog=catalog)
    assert commit.table == root and commit.barrier >= before
    assert tagged(catalog, root) == [(commit.snapshot_id, "append_root", commit.barrier)]
    version = client.get_version(root, "weak")
    assert (version.barrier, version.snapshot_id) == (commit.barrier, commit.snapshot_id)
    table = ice.load_table(root, catalog)
    assert table.scan(snapshot_id=commit.snapshot_id).to_arrow().num_rows == 3
    second = sp.append_root(spark, batch(spark, [4]), root, client=client, catalog=catalog)
    assert second.barrier > commit.barrier


def test_explicit_barrier_replay_commits_nothing_twice(spark, catalog, client, root):
    first = sp.append_root(spark, batch(spark, [1, 2]), root, client=client, catalog=catalog,
                           barrier=1_000)
    again = sp.append_root(spark, batch(spark, [1, 2]), root, client=client, catalog=catalog,
                           barrier=1_000)
    assert again == first
    assert len(tagged(catalog, root)) == 1
    with pytest.raises(sp.BarrierRegressionError):
        sp.append_root(spark, batch(spark, [3]), root, client=client, catalog=catalog,
                       barrier=900)
    assert len(ice.load_table(root, catalog).snapshots()) == 1  # refused before writing


def test_a_lost_report_is_delivered_by_the_next_call(spark, catalog, client, crashing_client,
                                                     root):
    crashing = crashing_client(lambda r: r.method == "POST" and r.url.path.endswith("/barriers"))
    with pytest.raises(sp.TransportError):
        sp.append_root(spark, batch(spark, [1, 2]), root, client=crashing, catalog=catalog,
                       barrier=5_000)
    [(snapshot_id, _, barrier)] = tagged(catalog, root)
    with pytest.raises(sp.UnknownTableError):  # never reported: the service has not heard of it
        client.get_version(root, "weak")
    # The re-run of the same ingestion: the lost commit is reported, nothing is committed twice.
    replay = sp.append_root(spark, batch(spark, [1, 2]), root, client=client, catalog=catalog,
                            barrier=5_000)
    assert (replay.barrier, replay.snapshot_id) == (5_000, snapshot_id)
    assert len(tagged(catalog, root)) == 1
    assert client.get_version(root, "weak").snapshot_id == snapshot_id


def test_heartbeat_advances_an_idle_root(spark, catalog, client, root):
    commit = sp.append_root(spark, batch(spark, [1]), root, client=client, catalog=catalog,
                            barrier=10_000)
    beat = sp.heartbeat_root(root, client=client, catalog=catalog, barrier=20_000)
    assert (beat.barrier, beat.snapshot_id) == (20_000, commit.snapshot_id)
    assert client.get_version(root, "weak").barrier == 20_000


def test_heartbeat_is_refused_when_iceberg_holds_unreported_data(spark, catalog, client, root):
    sp.append_root(spark, batch(spark, [1]), root, client=client, catalog=catalog,
                   barrier=10_000)
    table = ice.load_table(root, catalog)
    table.append(table.scan().to_arrow())  # a writer that does not report
    with pytest.raises(sp.LakeStateError, match="not recorded"):
        sp.heartbeat_root(root, client=client, catalog=catalog, barrier=20_000)


def test_a_table_written_by_a_running_job_is_not_a_root(spark, catalog, client, database, root):
    sink = f"lake.{database}.derived"
    sp.create_table_from_spark_schema(sink, batch(spark, [0]).schema, catalog=catalog)
    job = f"{database}.writer"
    client.register_source(job, root)
    client.register_sink(job, sink)
    client.start_job(job)
    try:
        with pytest.raises(sp.TableHasWriterError):
            sp.append_root(spark, batch(spark, [1]), sink, client=client, catalog=catalog)
        assert ice.load_table(sink, catalog).current_snapshot() is None
    finally:
        client.unregister(job)
