"""The plugin on MetaService's built-in Iceberg catalog (docs/contract.md#the-built-in-catalog),
with no catalog configured: tables named ``house.<db>.<table>`` are found nowhere else, so the
plugin opens ``<server>/iceberg``. Each commit records its barrier in the catalog's own transaction,
and the plugin sends no report after it; a crash between a commit and the rest commits nothing
twice.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

import spark_plugin as sp
from spark_plugin import _iceberg as ice
from tests.spark_plugin.conftest import BUILTIN_CATALOG

pytestmark = pytest.mark.spark

def is_report(request) -> bool:
    """``POST /commit/{job}/{table}`` and ``POST /tables/{table}/barriers``: the reports of a
    job's and of a root's commit."""
    path = request.url.path
    return request.method == "POST" and (
        path.startswith("/commit/") or (path.startswith("/tables/") and path.endswith("/barriers")))


def batch(spark, ids: list[int]):
    return spark.createDataFrame([(i, float(i)) for i in ids], "id long, amount double")


@pytest.fixture
def client(builtin_url: str):
    with sp.MetaServiceClient(builtin_url) as c:
        yield c


@pytest.fixture
def no_reports(builtin_url: str):
    """A client whose reports after a commit never leave the process: anything that still
    needs one fails with TransportError."""
    from tests.spark_plugin.conftest import CrashingTransport

    transport = CrashingTransport(is_report)
    with sp.MetaServiceClient(builtin_url, max_retries=0, transport=transport) as c:
        c.transport = transport  # type: ignore[attr-defined]
        yield c


@pytest.fixture
def database() -> str:
    return f"db_{uuid.uuid4().hex[:10]}"


def name(database: str, table: str) -> str:
    return f"{BUILTIN_CATALOG}.{database}.{table}"


def recorded(client, table: str) -> list[tuple[int, int, str | None]]:
    return [(b["barrier"], b["snapshot_id"], b.get("writer_job"))
            for b in client.table_barriers(table)["barriers"]]


def tagged(client, table: str) -> list[tuple[int, str, int]]:
    return ice.tagged_snapshots(ice.load_table(table, client=client).metadata)


def test_tables_are_created_and_found_in_the_builtin_catalog(spark, client, builtin_url,
                                                             database):
    root = name(database, "orders")
    sp.create_table_from_spark_schema(root, batch(spark, [0]).schema, client=client)
    served = client.request("GET", f"/iceberg/v1/namespaces/{database}/tables/orders",
                            idempotent=True)
    assert served["metadata"]["schemas"][0]["fields"][0]["name"] == "id"
    table = ice.load_table(root, client=client)
    assert ice.records_barriers(table, builtin_url)
    assert table.catalog.properties["uri"] == f"{builtin_url}/iceberg"


def test_append_root_records_its_barrier_in_the_commit(spark, client, no_reports, database):
    root = name(database, "orders")
    sp.create_table_from_spark_schema(root, batch(spark, [0]).schema, client=client)
    commit = sp.append_root(spark, batch(spark, [1, 2]), root, client=no_reports,
                            barrier=5_000)
    assert no_reports.transport.crashed == []  # no report was even attempted
    assert recorded(client, root) == [(5_000, commit.snapshot_id, None)]
    assert tagged(client, root) == [(commit.snapshot_id, "append_root", 5_000)]
    # a replay of the same barrier commits nothing
    again = sp.append_root(spark, batch(spark, [1, 2]), root, client=no_reports, barrier=5_000)
    assert again == commit
    assert len(ice.load_table(root, client=client).snapshots()) == 1


def test_a_batch_job_commits_each_sink_with_its_barrier_and_reports_nothing(
        spark, client, no_reports, database):
    root, left, right = (name(database, t) for t in ("events", "left", "right"))
    for t in (root, left, right):
        sp.create_table_from_spark_schema(t, batch(spark, [0]).schema, client=client)
    sp.append_root(spark, batch(spark, [1, 2, 3]), root, client=client, barrier=1_000)
    job_id = f"{database}.split"
    with sp.BarrierJob(spark, job_id, [root], [left, right], client=no_reports) as job:
        step = job.next()
        assert step.barrier == 1_000
        step.write(left, step.read(root).where("id < 2"))
        step.write(right, step.read(root).where("id >= 2"))
        commits = step.commit()
        assert job.next() is None  # the service saw the barrier committed: nothing newer
    assert no_reports.transport.crashed == []
    for sink, ids in ((left, [1]), (right, [2, 3])):
        snapshot = commits[sink].snapshot_id
        assert recorded(client, sink) == [(1_000, snapshot, job_id)]
        table = ice.load_table(sink, client=client)
        summary = table.metadata.snapshot_by_id(snapshot).summary
        assert (summary["metaservice.job"], summary["metaservice.barrier"]) == (job_id, "1000")
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == ids
    assert client.get_job(job_id)["last_committed_barrier"] == 1_000


def test_a_crash_between_the_commits_of_a_step_commits_nothing_twice(spark, client, database):
    """The doomed run commits the first sink (the barrier is recorded with it) and dies before
    the second. The re-run gets the same pinned barrier, finds the first commit, commits only
    the second, and the job's barrier completes once."""
    root, left, right = (name(database, t) for t in ("events", "left", "right"))
    for t in (root, left, right):
        sp.create_table_from_spark_schema(t, batch(spark, [0]).schema, client=client)
    sp.append_root(spark, batch(spark, [1, 2]), root, client=client, barrier=1_000)
    job_id = f"{database}.crashy"
    doomed = sp.BarrierJob(spark, job_id, [root], [left, right], client=client).start()
    step = doomed.next()
    step.write(left, step.read(root))
    # what step.commit() does for its first sink, after which the process dies:
    first = ice.commit_sink(doomed._table(left), job=job_id, barrier=step.barrier,
                            data_files=step._pending[left].files, overwrite=True)
    assert recorded(client, left) == [(1_000, first.snapshot_id, job_id)]
    assert recorded(client, right) == []
    assert client.get_job(job_id)["pinned_barrier"] == 1_000

    with sp.BarrierJob(spark, job_id, [root], [left, right], client=client) as job:
        again = job.next()
        assert again.barrier == 1_000
        again.write(left, again.read(root))
        again.write(right, again.read(root))
        commits = again.commit()
    assert commits[left].snapshot_id == first.snapshot_id
    for sink in (left, right):
        assert [t[1:] for t in tagged(client, sink)] == [(job_id, 1_000)]
        assert len(recorded(client, sink)) == 1
        assert sorted(ice.load_table(sink, client=client).scan().to_arrow()["id"]
                      .to_pylist()) == [1, 2]
    assert client.get_job(job_id)["last_committed_barrier"] == 1_000


def test_a_commit_the_catalog_refuses_raises_the_services_error_at_once(spark, client,
                                                                       database):
    root, sink = name(database, "events"), name(database, "out")
    for t in (root, sink):
        sp.create_table_from_spark_schema(t, batch(spark, [0]).schema, client=client)
    sp.append_root(spark, batch(spark, [1]), root, client=client, barrier=1_000)
    job_id = f"{database}.refused"
    with sp.BarrierJob(spark, job_id, [root], [sink], client=client) as job:
        assert job.next().barrier == 1_000
        table = ice.load_table(sink, client=client)
        started = time.monotonic()
        with pytest.raises(sp.UnknownBarrierError, match="not handed"):
            ice.commit_sink(table, job=job_id, barrier=900)
        # refused once, not retried as a conflict (pyiceberg's and the plugin's retries)
        assert time.monotonic() - started < 2
        with pytest.raises(sp.TableHasWriterError):
            ice.commit_sink(table, job="intruder", barrier=1_000, root=True)
    assert ice.load_table(sink, client=client).snapshots() == []


# -- Structured Streaming, killed between the commit and the rest ---------------------------


def ingest(client, table: str, rows: dict[str, list[int]], barrier: int) -> None:
    """One root snapshot at ``barrier`` through the built-in catalog (recorded by the commit)."""
    import pyarrow as pa
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    tbl = ice.load_table(table, client=client)
    data = pa.Table.from_pydict(rows, schema=schema_to_pyarrow(tbl.schema(),
                                                               include_field_ids=False))
    ice.commit_sink(tbl, job="test-ingest", barrier=barrier, root=True,
                    data_files=ice.data_files_from_arrow(tbl, data))


def test_streaming_is_exactly_once_across_driver_kills_on_the_builtin_catalog(
        client, builtin_url, database, tmp_path: Path):
    """The driver is killed right after the sink's Iceberg commit: the barrier is then already
    recorded (there is no report to lose), and the restarted query commits every barrier once.
    The other crash points do not depend on the catalog (test_streaming_exactly_once.py)."""
    from tests.spark_plugin.crash_runs import CrashPipeline, create_tables

    catalog = ice.find_catalog(BUILTIN_CATALOG, conf={}, url=builtin_url).load()
    catalog.create_namespace(database)
    create_tables(catalog, database, ("events", "events_out"))
    pipeline = CrashPipeline(
        url=builtin_url, client=client, job=f"{database}.exactly-once",
        source=name(database, "events"), sink=name(database, "events_out"), workdir=tmp_path,
        load=lambda table: ice.load_table(table, client=client),
        ingest=lambda table, rows, barrier: ingest(client, table, rows, barrier))
    pipeline.ingest_next()
    try:
        pipeline.crash("after_iceberg_commit", 2)
        # the commit is the record: Iceberg and the service never disagree
        assert pipeline.iceberg_latest() == pipeline.sink_latest()
        pipeline.finish(more_barriers=1)
    finally:
        pipeline.kill_leftovers()
    pipeline.check_exactly_once()


def test_expire_snapshots_through_the_builtin_catalog(client, builtin_url, database):
    """Maintenance finds the built-in catalog too; the catalog records the removal in the same
    transaction as the plugin's two-phase expiration."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    catalog = ice.find_catalog(BUILTIN_CATALOG, conf={}, url=builtin_url).load()
    catalog.create_namespace(database)
    table = catalog.create_table((database, "r"),
                                 schema=Schema(NestedField(1, "id", LongType(), required=False)))
    for i in range(3):
        table.append(pa.table({"id": pa.array([i], pa.int64())}),
                     snapshot_properties={"metaservice.barrier": str(1_000 * (i + 1))})
    ids = [s.snapshot_id for s in catalog.load_table((database, "r")).snapshots()]
    summary = sp.expire_snapshots(name(database, "r"), client=client, retain_last=1)
    assert sorted(summary.expired) == sorted(summary.approved) == sorted(ids[:2])
    remaining = [s.snapshot_id for s in catalog.load_table((database, "r")).snapshots()]
    assert remaining == [s for s in ids if s not in summary.expired]
    assert ids[-1] in remaining


@pytest.mark.parametrize("mode", ["append", "complete"])
def test_a_streaming_barrier_with_no_new_rows_is_committed_through_the_builtin_catalog(
        spark, client, builtin_url, database, tmp_path: Path, mode: str):
    """A barrier that brings the query nothing new (here a root heartbeat: "nothing new up to
    2000") still completes the sink. Through the built-in catalog the sink cannot report its
    current snapshot at the new barrier (the catalog records barriers, POST /commit only
    confirms one it recorded: 409 held_by_catalog), so it commits an empty snapshot of the
    barrier, which keeps the sink's rows in either mode."""
    from tests.spark_plugin.test_streaming import sink, source

    catalog = ice.find_catalog(BUILTIN_CATALOG, conf={}, url=builtin_url).load()
    catalog.create_namespace(database)
    events, out = name(database, "events"), name(database, "out")
    sp.create_table_from_spark_schema(events, spark.createDataFrame([], "id long").schema,
                                      client=client)
    sp.create_table_from_spark_schema(out, spark.createDataFrame([], "n long").schema,
                                      client=client)
    sp.register_data_source(spark, url=builtin_url)
    job = f"{database}.copy"
    ingest(client, events, {"id": [1, 2]}, 1_000)

    def run() -> None:
        df = source(spark, builtin_url, job, events, startingBarrier="earliest")
        if mode == "complete":
            df = df.groupBy().count().selectExpr("count AS n")
        else:
            df = df.selectExpr("id AS n")
        query = sink(df, builtin_url, job, out, tmp_path / "ckpt",
                     mode=mode, trigger={"availableNow": True})
        assert query.awaitTermination(180)
        assert query.exception() is None, str(query.exception())[:1000]

    run()
    assert client.table_barriers(out, limit=1)["latest_barrier"] == 1_000
    root_snapshot = client.table_barriers(events, limit=1)["latest_snapshot_id"]
    client.report_root_barrier(events, root_snapshot, 2_000)  # a heartbeat of the root
    run()
    history = client.table_barriers(out)["barriers"]
    assert [b["barrier"] for b in history] == [2_000, 1_000]
    assert history[0]["writer_job"] == job
    assert [b for _, _, b in tagged(client, out)] == [1_000, 2_000]
    rows = ice.load_table(out, client=client).scan().to_arrow()["n"].to_pylist()
    assert sorted(rows) == ([1, 2] if mode == "append" else [2])
