"""The plugin's ``BarrierJob`` on the Spark 4.1 route: with Iceberg's own ``SparkCatalog`` as
the session's catalog, a job reads each barrier's snapshots and commits its sinks through
Iceberg's runtime (``spark_plugin._runtime_io``), and keeps its exactly-once guarantee across a
SIGKILL of its driver between the commits of one step's two sinks.

The driver (``tests/engines/spark41/barrier_job_driver.py``) runs in ``.venv-spark41`` (pyspark
4.1.1 with Iceberg 1.12's runtime, ``engines/spark41/install.sh``) against a server of its own
with its built-in catalog; the root is ingested here with pyiceberg through that catalog.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

import spark_plugin as sp
from spark_plugin import _iceberg as ice
from tests.engines.spark41.rig import PYTHON, RUNTIME
from tests.spark_plugin.conftest import BUILTIN_CATALOG

pytestmark = pytest.mark.spark_jvm

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "engines" / "spark41" / "barrier_job_driver.py"
RUN_SECONDS = 300


def run_driver(args: list[str], log: Path, crash_at: str | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("METASERVICE_PLUGIN")}
    env["PYTHONPATH"] = str(ROOT)
    if crash_at:
        env["METASERVICE_PLUGIN_CRASH_AT"] = crash_at
    with open(log, "wb") as out:
        process = subprocess.Popen([str(PYTHON), str(DRIVER), *args], env=env, cwd=ROOT,
                                   start_new_session=True, stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        process.wait(timeout=RUN_SECONDS)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return process


def test_a_barrier_job_through_icebergs_runtime_commits_each_barrier_once_across_a_kill(
        builtin_url: str, tmp_path: Path) -> None:
    if not PYTHON.exists() or not RUNTIME.exists():
        from tests.conftest import missing

        missing("the Spark 4.1 route is not set up (bash engines/spark41/install.sh)",
                required_by="METASERVICE_REQUIRE_SPARK_JVM")
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    client = sp.MetaServiceClient(builtin_url)
    catalog = sp.CatalogSpec.metaservice(BUILTIN_CATALOG, builtin_url).load()
    database = f"rt_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(database)
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "amount", LongType(), required=False))
    source, doubled, large = (f"{BUILTIN_CATALOG}.{database}.{t}"
                              for t in ("events", "doubled", "large"))
    for table in (source, doubled, large):
        catalog.create_table(tuple(table.split(".")[1:]), schema=schema)
    events = catalog.load_table((database, "events"))
    batches = {1_000: [(1, 10), (2, 60)], 2_000: [(3, 70)], 3_000: [(4, 5), (5, 90)]}

    def ingest(barrier: int) -> None:
        rows = batches[barrier]
        events.append(pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                                "amount": pa.array([r[1] for r in rows], pa.int64())}),
                      snapshot_properties={"metaservice.barrier": str(barrier)})

    ingest(1_000)
    job = f"{database}.split"
    args = [str(RUNTIME), builtin_url, BUILTIN_CATALOG, job, source, doubled, large]
    doomed = run_driver(args, tmp_path / "run-1.log", crash_at="after_sink_commit@1")
    output = (tmp_path / "run-1.log").read_text(errors="replace")
    assert doomed.returncode == -signal.SIGKILL, output[-3000:]
    # the first sink holds barrier 1000, the second does not: the step was cut in two
    assert [b["barrier"] for b in client.table_barriers(doubled)["barriers"]] == [1_000]
    assert client.table_barriers(large)["barriers"] == []

    ingest(2_000)
    ingest(3_000)
    finished = run_driver(args, tmp_path / "run-2.log")
    output = (tmp_path / "run-2.log").read_text(errors="replace")
    assert finished.returncode == 0, output[-3000:]
    steps = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    # the cut step replayed first, then the newest barrier (2000 and 3000 in one step)
    assert [step["barrier"] for step in steps] == [1_000, 3_000]

    for sink, keep in ((doubled, lambda r: (r[0], r[1] * 2)),
                       (large, lambda r: r if r[1] >= 50 else None)):
        recorded = sorted(client.table_barriers(sink)["barriers"], key=lambda b: b["barrier"])
        assert [b["barrier"] for b in recorded] == [1_000, 3_000]
        table = ice.load_table(sink, client=client)
        tagged = [(s, b) for s, j, b in ice.tagged_snapshots(table.metadata) if j == job]
        assert tagged == [(b["snapshot_id"], b["barrier"]) for b in recorded]  # each once
        for entry in recorded:
            snapshot = table.metadata.snapshot_by_id(entry["snapshot_id"])
            assert "spark.app.id" in snapshot.summary.additional_properties  # the runtime's
            expected = sorted(filter(None, (keep(r) for b, rows in batches.items()
                                            if b <= entry["barrier"] for r in rows)))
            rows = table.scan(snapshot_id=entry["snapshot_id"]).to_arrow()
            assert sorted(zip(rows["id"].to_pylist(), rows["amount"].to_pylist(),
                              strict=True)) == expected, (sink, entry["barrier"])
    assert client.get_job(job)["state"] == "terminated"
    client.close()


def test_a_barrier_job_through_icebergs_runtime_names_nested_tables_as_spark_sql_does(
        builtin_url: str, tmp_path: Path) -> None:
    """Tables in the namespace (``rt_…``, ``eu.west``) named with spaces, dots, accents and
    backticks: the plugin hands Spark their dotted names, parts in backticks, which Spark's
    parser and Iceberg's runtime read as the same tables (a full step, then an incremental one
    that reads the appended rows through the ``iceberg`` format)."""
    if not PYTHON.exists() or not RUNTIME.exists():
        from tests.conftest import missing

        missing("the Spark 4.1 route is not set up (bash engines/spark41/install.sh)",
                required_by="METASERVICE_REQUIRE_SPARK_JVM")
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    client = sp.MetaServiceClient(builtin_url)
    catalog = sp.CatalogSpec.metaservice(BUILTIN_CATALOG, builtin_url).load()
    namespace = (f"rt {uuid.uuid4().hex[:8]}", "eu.west")
    catalog.create_namespace(namespace[:1])
    catalog.create_namespace(namespace)
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "amount", LongType(), required=False))
    source, doubled, large = (sp.TableName.of(BUILTIN_CATALOG, namespace, t)
                              for t in ("events été", "doubled.v2", "large `x`"))
    for table in (source, doubled, large):
        catalog.create_table(table.identifier, schema=schema)
    events = catalog.load_table(source.identifier)
    batches = {1_000: [(1, 10), (2, 60)], 2_000: [(3, 70)]}

    def ingest(barrier: int) -> None:
        rows = batches[barrier]
        events.append(pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                                "amount": pa.array([r[1] for r in rows], pa.int64())}),
                      snapshot_properties={"metaservice.barrier": str(barrier)})

    job = f"nested-{uuid.uuid4().hex[:8]}"
    args = [str(RUNTIME), builtin_url, BUILTIN_CATALOG, job, str(source), str(doubled),
            str(large)]
    steps = []
    for barrier in batches:
        ingest(barrier)
        run = run_driver(args, tmp_path / f"run-{barrier}.log")
        output = (tmp_path / f"run-{barrier}.log").read_text(errors="replace")
        assert run.returncode == 0, output[-3000:]
        steps += [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert [(s["barrier"], s["full"], sorted(s["commits"])) for s in steps] == [
        (1_000, True, sorted([str(doubled), str(large)])),
        (2_000, False, sorted([str(doubled), str(large)]))]
    for sink, expected in ((doubled, [(1, 20), (2, 120), (3, 140)]),
                           (large, [(2, 60), (3, 70)])):
        assert client.get_version(sink, "weak").barrier == 2_000
        rows = ice.load_table(sink, client=client).scan().to_arrow()
        assert sorted(zip(rows["id"].to_pylist(), rows["amount"].to_pylist(),
                          strict=True)) == expected, sink
    client.close()
