"""Plain-data parts of the streaming integration: offsets and Spark's offset log, options,
partition packing, the crash hook. No Spark, no server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from spark_plugin._executor_tables import pack_tasks
from spark_plugin.streaming.checkpoint import (
    clear_staged,
    job_batch,
    logged_offsets,
    query_id,
    stage_output,
    staged_output,
)
from spark_plugin.streaming.offsets import BarrierOffset
from spark_plugin.streaming.options import (
    BatchReadOptions,
    OptionError,
    SinkOptions,
    SourceOptions,
)


def write_offset_log(root, batch: int, *offsets) -> None:
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})]
    lines += [o if isinstance(o, str) else json.dumps(o) for o in offsets]
    (root / "offsets" / str(batch)).write_text("\n".join(lines))


def test_offset_round_trip_and_registration_marker():
    offset = BarrierOffset("j", 5, {"c.d.b": 2, "c.d.a": 1})
    assert BarrierOffset.from_json(json.loads(json.dumps(offset.to_json()))) == offset
    assert "registration" not in offset.to_json()
    marked = BarrierOffset.initial("j").next_registration()
    assert marked.to_json() == {"job": "j", "barrier": None, "snapshots": {}, "registration": 1}
    assert marked.to_json() != BarrierOffset.initial("j").to_json()


def test_offset_log_gives_the_barrier_of_a_batch_per_job(tmp_path):
    (tmp_path / "metadata").write_text('{"id":"q-1"}')
    write_offset_log(tmp_path, 3,
                     {"job": "a", "barrier": 30, "snapshots": {"c.d.x": 1}},
                     "-",
                     {"startOffset": 7},
                     {"job": "a", "barrier": 30, "snapshots": {"c.d.y": 2}},
                     {"job": "b", "barrier": 10, "snapshots": {"c.d.z": 3}})
    offsets = logged_offsets(str(tmp_path), 3)
    a = job_batch(offsets, "a")
    assert (a.aligned, a.barrier, a.snapshots) == (True, 30, {"c.d.x": 1, "c.d.y": 2})
    assert job_batch(offsets, "b").barrier == 10
    assert job_batch(offsets, "nope") is None
    assert logged_offsets(str(tmp_path), 4) is None
    assert logged_offsets(f"file://{tmp_path}", 3) == offsets
    assert query_id(str(tmp_path)) == "q-1"


def test_sources_of_one_job_at_different_barriers_are_not_a_barrier(tmp_path):
    write_offset_log(tmp_path, 0, {"job": "a", "barrier": 1, "snapshots": {}},
                     {"job": "a", "barrier": 2, "snapshots": {}})
    write_offset_log(tmp_path, 1, {"job": "a", "barrier": 2, "snapshots": {}},
                     {"job": "a", "barrier": 2, "snapshots": {}})
    first, second = (job_batch(logged_offsets(str(tmp_path), n), "a") for n in (0, 1))
    assert (first.aligned, first.barrier) == (False, None)
    assert (second.aligned, second.barrier) == (True, 2)
    assert not second.same_position(first)


def datafile(path: str):
    from pyiceberg.manifest import DataFile

    return DataFile.from_args(file_path=path, record_count=1, file_size_in_bytes=10)


def test_staged_output_survives_until_cleared_and_a_replay_replaces_it(tmp_path):
    ckpt = str(tmp_path)
    assert stage_output(ckpt, "j", 4, [datafile("/x/1"), datafile("/x/2")]) == []
    # a replay of batch 4 wrote other files: the earlier ones are returned for deletion
    assert stage_output(ckpt, "j", 4, [datafile("/x/2"), datafile("/x/3")]) == ["/x/1"]
    stage_output(ckpt, "j", 5, [datafile("/x/4")])
    staged = staged_output(ckpt, "j", before_batch=6)
    assert [(b, [f.file_path for f in files]) for b, files in staged] == [
        (4, ["/x/2", "/x/3"]), (5, ["/x/4"])]
    assert staged_output(ckpt, "j", before_batch=5)[0][0] == 4
    assert staged_output(ckpt, "other", before_batch=6) == []
    clear_staged(ckpt, "j", up_to_batch=6)
    assert staged_output(ckpt, "j", before_batch=100) == []


def test_options_are_matched_case_insensitively_and_validated(monkeypatch):
    monkeypatch.delenv("METASERVICE_URL", raising=False)
    o = SourceOptions.parse({"metaservice.url": "http://x/", "JOB": "j", "table": "c.d.t",
                             "startingBarrier": "1234", "maxFilesPerTrigger": "3"})
    assert (o.connection.url, o.job, o.table, o.starting_barrier, o.max_files_per_trigger) == (
        "http://x", "j", "c.d.t", 1234, 3)
    with pytest.raises(OptionError, match="URL"):
        SourceOptions.parse({"job": "j", "table": "c.d.t"})
    with pytest.raises(OptionError, match="startingBarrier"):
        SourceOptions.parse({"metaservice.url": "u", "job": "j", "table": "c.d.t",
                             "startingbarrier": "soon"})
    with pytest.raises(OptionError, match="catalog.database.table"):
        SourceOptions.parse({"metaservice.url": "u", "job": "j", "table": "t"})
    with pytest.raises(OptionError, match="checkpointLocation"):
        SinkOptions.parse({"metaservice.url": "u", "job": "j", "table": "c.d.t"})
    b = BatchReadOptions.parse({"metaservice.url": "u", "table": "c.d.t", "leaseSeconds": "0"})
    assert (b.consistency, b.lease_seconds) == ("strong", None)
    with pytest.raises(OptionError, match="consistency"):
        BatchReadOptions.parse({"metaservice.url": "u", "table": "c.d.t",
                                "consistency": "eventual"})


def test_token_never_shows_in_repr(monkeypatch):
    o = SourceOptions.parse({"metaservice.url": "u", "metaservice.token": "s3cret", "job": "j",
                             "table": "c.d.t"})
    assert "s3cret" not in repr(o)


def task(size: int):
    return SimpleNamespace(file=SimpleNamespace(file_size_in_bytes=size))


def test_packing_balances_bytes_and_keeps_every_task():
    tasks = [task(s) for s in (50, 40, 30, 20, 10, 5)]
    bins = pack_tasks(tasks, target_bytes=60)
    assert sorted(id(t) for b in bins for t in b) == sorted(id(t) for t in tasks)
    assert len(bins) == 3
    assert len(pack_tasks([task(1)], 100)) == 1
    assert len(pack_tasks([task(1), task(1), task(1)], 100)) == 2  # both cores busy
    assert pack_tasks([], 100) == []


def test_crash_hook_does_nothing_unless_armed_and_kills_at_the_named_point(tmp_path):
    from spark_plugin import _crash_points as crash_points

    crash_points.crash_point("after_report", 1)  # not armed: returns
    code = ("from spark_plugin._crash_points import crash_point\n"
            "crash_point('after_report', 1)\n"
            "crash_point('after_iceberg_commit', 1)\n"
            "crash_point('after_iceberg_commit', 2)\n"
            "print('survived')\n")
    env = {**os.environ, "METASERVICE_PLUGIN_CRASH_AT": "after_iceberg_commit@2",
           "METASERVICE_PLUGIN_CRASH_LOG": str(tmp_path / "log")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
    assert done.returncode == -9
    assert b"survived" not in done.stdout
    assert (tmp_path / "log").read_text().startswith(
        "metaservice crash point after_iceberg_commit (batch 2")
