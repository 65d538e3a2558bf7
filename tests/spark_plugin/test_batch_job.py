"""BarrierJob against the real server: plan/start/stop, steps, reads, commits, crashes."""

from __future__ import annotations

import pytest

import spark_plugin as sp
from spark_plugin import _iceberg as ice

pytestmark = pytest.mark.spark


def batch(spark, ids: list[int]):
    return spark.createDataFrame([(i, float(i)) for i in ids], "id long, amount double")


@pytest.fixture
def tables(spark, catalog, database) -> tuple[str, str]:
    root, sink = f"lake.{database}.events", f"lake.{database}.doubled"
    schema = batch(spark, [0]).schema
    sp.create_table_from_spark_schema(root, schema, catalog=catalog)
    sp.create_table_from_spark_schema(sink, schema, catalog=catalog)
    return root, sink


def ids_at(catalog, name: str, snapshot_id: int) -> list[int]:
    table = ice.load_table(name, catalog)
    return sorted(table.scan(snapshot_id=snapshot_id).to_arrow()["id"].to_pylist())


def test_plan_start_step_commit_stop(spark, catalog, client, database, tables):
    root, sink = tables
    first = sp.append_root(spark, batch(spark, [1, 2]), root, client=client, catalog=catalog,
                           barrier=1_000)
    name = f"{database}.double"
    job = sp.BarrierJob(spark, name, sources=[root], sinks=[sink], client=client,
                        catalog=catalog)
    assert client.get_job(name)["state"] == "planned"
    with job:
        assert client.get_job(name)["state"] == "running"
        step = job.next()
        assert step is not None and step.is_initial
        assert (step.barrier, step.snapshots) == (1_000, {root: first.snapshot_id})
        assert job.next() is step  # pinned until committed
        df = step.read(root)
        step.write(sink, df.selectExpr("id", "amount * 2 AS amount"), mode="overwrite")
        commits = step.commit()
        assert job.next() is None and job.retry_after_ms  # nothing newer: wait

        second = sp.append_root(spark, batch(spark, [3]), root, client=client,
                                catalog=catalog, barrier=2_000)
        step2 = job.next()
        assert (step2.barrier, step2.previous, step2.snapshots) == (
            2_000, {root: first.snapshot_id}, {root: second.snapshot_id})
        assert sorted(r.id for r in step2.read_changes(root).collect()) == [3]
        assert sorted(r.id for r in step2.read(root).collect()) == [1, 2, 3]
        step2.write(sink, step2.read_changes(root).selectExpr("id", "amount * 2 AS amount"))
        commits2 = step2.commit()
    assert client.get_job(name)["state"] == "terminated"

    snapshot = commits[sink].snapshot_id
    table = ice.load_table(sink, catalog)
    summary = table.metadata.snapshot_by_id(snapshot).summary
    assert (summary["metaservice.job"], summary["metaservice.barrier"]) == (name, "1000")
    assert table.properties[f"metaservice.sink.{name}.last-barrier"] == "2000"
    assert ids_at(catalog, sink, commits2[sink].snapshot_id) == [1, 2, 3]
    version = client.get_versions([sink], "weak").versions[sink]
    assert (version.barrier, version.snapshot_id) == (2_000, commits2[sink].snapshot_id)


def test_a_sink_not_written_still_completes_the_barrier(spark, catalog, client, database,
                                                         tables):
    root, sink = tables
    sp.append_root(spark, batch(spark, [1]), root, client=client, catalog=catalog, barrier=1_000)
    with sp.BarrierJob(spark, f"{database}.idle", [root], [sink], client=client,
                       catalog=catalog) as job:
        commits = job.next().commit()
    assert commits[sink].barrier == 1_000
    assert ids_at(catalog, sink, commits[sink].snapshot_id) == []


def test_an_exception_aborts_the_barrier_and_unregisters(spark, catalog, client, database,
                                                         tables):
    root, sink = tables
    sp.append_root(spark, batch(spark, [1]), root, client=client, catalog=catalog, barrier=1_000)
    name = f"{database}.failing"
    with (pytest.raises(RuntimeError, match="boom"),
          sp.BarrierJob(spark, name, [root], [sink], client=client, catalog=catalog) as job):
        step = job.next()
        step.write(sink, step.read(root))
        raise RuntimeError("boom")
    assert step.state == "aborted"
    assert client.get_job(name)["state"] == "terminated"
    progress = client.request("GET", f"/jobs/{name}/progress", idempotent=True)["progress"]
    assert progress[0]["state"] == "aborted" and "boom" in progress[0]["last_abort_reason"]
    assert ice.load_table(sink, catalog).current_snapshot() is None


def test_a_job_whose_sources_have_no_barrier_waits(spark, catalog, client, database, tables):
    root, sink = tables
    with sp.BarrierJob(spark, f"{database}.early", [root], [sink], client=client,
                       catalog=catalog) as job:
        assert job.next() is None
        assert job.retry_after_ms is not None
        assert job.wait_next(timeout_seconds=0.2) is None
        sp.append_root(spark, batch(spark, [1]), root, client=client, catalog=catalog,
                       barrier=1_000)
        step = job.wait_next(timeout_seconds=10)
        assert step is not None and step.barrier == 1_000


def test_read_changes_refuses_snapshots_that_rewrote_data(spark, catalog, client, database,
                                                          tables):
    root, sink = tables
    sp.append_root(spark, batch(spark, [1]), root, client=client, catalog=catalog, barrier=1_000)
    with sp.BarrierJob(spark, f"{database}.strict", [root], [sink], client=client,
                       catalog=catalog) as job:
        job.next().commit()
        table = ice.load_table(root, catalog)
        table.overwrite(table.scan().to_arrow(), snapshot_properties={})  # rewrites the data
        table.refresh()
        client.report_root_barrier(root, table.current_snapshot().snapshot_id, 2_000)
        step = job.next()
        with pytest.raises(sp.NotAppendOnlyError, match="not an append"):
            step.read_changes(root)
        assert sorted(r.id for r in step.read(root).collect()) == [1]


def test_reads_and_writes_are_checked_against_the_plan(spark, catalog, client, database,
                                                      tables):
    root, sink = tables
    sp.append_root(spark, batch(spark, [1]), root, client=client, catalog=catalog, barrier=1_000)
    with sp.BarrierJob(spark, f"{database}.checked", [root], [sink], client=client,
                       catalog=catalog) as job:
        step = job.next()
        with pytest.raises(ValueError, match="not a source"):
            step.read(sink)
        with pytest.raises(ValueError, match="not a sink"):
            step.write(root, batch(spark, [1]))


def test_crash_between_iceberg_commit_and_report_then_rerun(spark, catalog, client,
                                                            crashing_client, database, tables):
    """The process dies after the sink's Iceberg commit, before the report: the job is never
    closed. The re-run gets the same pinned barrier, commits nothing twice and the report
    arrives."""
    root, sink = tables
    sp.append_root(spark, batch(spark, [1, 2, 3]), root, client=client, catalog=catalog,
                   barrier=1_000)
    name = f"{database}.crashy"
    crashing = crashing_client(lambda r: r.url.path.startswith("/commit/"))
    doomed = sp.BarrierJob(spark, name, [root], [sink], client=crashing, catalog=catalog)
    doomed.start()
    step = doomed.next()
    step.write(sink, step.read(root), mode="overwrite")
    with pytest.raises(sp.TransportError):
        step.commit()
    # -- the process is gone; what it left behind:
    [(committed_snapshot, job_tag, barrier)] = ice.tagged_snapshots(
        ice.load_table(sink, catalog).metadata)
    assert (job_tag, barrier) == (name, 1_000)
    with pytest.raises(sp.NoVersionError):
        client.get_version(sink, "weak")

    # -- the re-run, a new process with the same job id:
    with sp.BarrierJob(spark, name, [root], [sink], client=client, catalog=catalog) as job:
        again = job.next()
        assert again.barrier == 1_000
        again.write(sink, again.read(root), mode="overwrite")
        commits = again.commit()
    assert commits[sink].snapshot_id == committed_snapshot
    table = ice.load_table(sink, catalog)
    assert [t[1:] for t in ice.tagged_snapshots(table.metadata)] == [(name, 1_000)]
    assert len(table.snapshots()) == 1
    assert ids_at(catalog, sink, committed_snapshot) == [1, 2, 3]
    version = client.get_version(sink, "weak")
    assert (version.barrier, version.snapshot_id) == (1_000, committed_snapshot)


def test_a_job_without_sources_chooses_fresh_barriers(spark, catalog, client, crashing_client,
                                                      database, tables):
    _, sink = tables
    name = f"{database}.ingest"
    crashing = crashing_client(lambda r: r.url.path.startswith("/commit/"))
    doomed = sp.BarrierJob(spark, name, sinks=[sink], client=crashing, catalog=catalog).start()
    step = doomed.next()
    assert step is not None and step.snapshots == {} and step.barrier > 0
    step.write(sink, batch(spark, [1, 2]))
    with pytest.raises(sp.TransportError):
        step.commit()
    # The re-run first reports the commit that reached Iceberg, then moves on.
    with sp.BarrierJob(spark, name, sinks=[sink], client=client, catalog=catalog) as job:
        assert client.get_version(sink, "weak").barrier == step.barrier
        nxt = job.next()
        assert nxt.barrier > step.barrier
        nxt.write(sink, batch(spark, [3]))
        commits = nxt.commit()
    assert ids_at(catalog, sink, commits[sink].snapshot_id) == [1, 2, 3]
    assert [t[2] for t in ice.tagged_snapshots(ice.load_table(sink, catalog).metadata)] == [
        step.barrier, nxt.barrier]


def test_a_full_step_replaces_the_sink_whatever_the_mode(spark, catalog, client, database,
                                                         tables):
    """A job run again from ``latest`` reads full snapshots; appending them would duplicate
    every row the sink already holds (docs/contract.md#the-spark-plugin: a full step replaces the
    sink)."""
    root, sink = tables
    sp.append_root(spark, batch(spark, [1, 2]), root, client=client, catalog=catalog,
                   barrier=1_000)
    name = f"{database}.rerun"
    for run, (ids, barrier) in enumerate([([], 1_000), ([3], 2_000)]):
        if ids:
            sp.append_root(spark, batch(spark, ids), root, client=client, catalog=catalog,
                           barrier=barrier)
        with sp.BarrierJob(spark, name, [root], [sink], client=client, catalog=catalog,
                           start_from="latest") as job:
            step = job.next()
            assert (step.barrier, step.is_full, step.previous) == (barrier, True, None), run
            changes = step.read_changes(root)
            step.write(sink, changes.filter("id = 1"))  # the first write replaces the sink ...
            step.write(sink, changes.filter("id != 1"))  # ... later ones add to it
            commits = step.commit()
        assert ids_at(catalog, sink, commits[sink].snapshot_id) == [1, 2, 3][:len(ids) + 2]
    version = client.get_version(sink, "weak")
    assert (version.barrier, version.snapshot_id) == (2_000, commits[sink].snapshot_id)


def test_a_full_step_empties_a_sink_it_does_not_write(spark, catalog, client, database, tables):
    root, sink = tables
    sp.append_root(spark, batch(spark, [1]), root, client=client, catalog=catalog, barrier=1_000)
    sp.append_root(spark, batch(spark, [7]), sink, client=client, catalog=catalog, barrier=500)
    with sp.BarrierJob(spark, f"{database}.quiet", [root], [sink], client=client,
                       catalog=catalog, start_from="latest") as job:
        commits = job.next().commit()
    assert ids_at(catalog, sink, commits[sink].snapshot_id) == []


@pytest.mark.parametrize("previous", [None, {}, "missing"])
def test_an_answer_without_previous_barrier_is_a_full_step(previous):
    """Servers answer a start position with ``previous: null`` (docs/contract.md#start); earlier
    ones with ``{}`` or nothing."""
    answer = {"action": "process", "barrier": 5, "snapshots": {"lake.db.t": 1}}
    if previous != "missing":
        answer["previous"] = previous
    position = sp.Position.from_json(answer)
    assert position.previous == (None if previous in (None, "missing") else {})


def test_available_processes_what_is_there_and_returns(spark, catalog, client, database, tables):
    root, sink = tables
    for i, barrier in enumerate([1_000, 2_000], start=1):
        sp.append_root(spark, batch(spark, [i]), root, client=client, catalog=catalog,
                       barrier=barrier)
    with sp.BarrierJob(spark, f"{database}.batch", [root], [sink], client=client,
                       catalog=catalog) as job:
        seen = []
        for step in job.available():
            step.write(sink, step.read_changes(root))
            step.commit()
            seen.append(step.barrier)
            # Data arriving during the run is left for the next one.
            sp.append_root(spark, batch(spark, [3]), root, client=client, catalog=catalog,
                           barrier=3_000)
        assert seen == [2_000]
    with sp.BarrierJob(spark, f"{database}.batch", [root], [sink], client=client,
                       catalog=catalog) as job:
        steps = list(_commit_each(job.available(), sink, root))
    assert [s.barrier for s in steps] == [3_000]
    assert ids_at(catalog, sink, steps[-1].commits[sink].snapshot_id) == [1, 2, 3]


def _commit_each(steps, sink, root):
    for step in steps:
        step.write(sink, step.read_changes(root))
        step.commit()
        yield step


def test_available_refuses_a_step_left_open(spark, catalog, client, database, tables):
    root, sink = tables
    sp.append_root(spark, batch(spark, [1]), root, client=client, catalog=catalog, barrier=1_000)
    with sp.BarrierJob(spark, f"{database}.lazy", [root], [sink], client=client,
                       catalog=catalog) as job:
        steps = job.available()
        step = next(steps)
        with pytest.raises(RuntimeError, match="left open"):
            next(steps)
        assert step.state == "open"


def test_available_gives_a_job_without_sources_one_step(spark, catalog, client, database,
                                                        tables):
    _, sink = tables
    with sp.BarrierJob(spark, f"{database}.once", sinks=[sink], client=client,
                       catalog=catalog) as job:
        steps = list(_commit_each_written(job.available(), sink, spark))
    assert len(steps) == 1 and not steps[0].is_full
    assert ids_at(catalog, sink, steps[0].commits[sink].snapshot_id) == [9]


def _commit_each_written(steps, sink, spark):
    for step in steps:
        step.write(sink, batch(spark, [9]))
        step.commit()
        yield step
