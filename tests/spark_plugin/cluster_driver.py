"""The Spark driver of the standalone-cluster tests, run in its own process.

    python cluster_driver.py batch  MASTER PREFIX RESULT_FILE
    spark-submit --master MASTER --conf spark.pyspark.python=PY \\
        cluster_driver.py stream MASTER PREFIX RESULT_FILE CHECKPOINT

Talks to the server named by ``$METASERVICE_URL`` with ``$METASERVICE_TOKEN`` (the driver's
environment only: the cluster's workers have neither), through the server's built-in catalog
(``PREFIX`` is ``<catalog>.<database>``). Spark's Python workers run ``PYSPARK_PYTHON``, set in
this process's environment before the session starts (``batch``), or by ``spark-submit`` from
``--conf spark.pyspark.python`` (``stream``).

``batch`` runs the README's batch example on the cluster: two tables, one ingested batch
(``append_root``), one ``BarrierJob`` step that enriches it. ``stream`` runs one Structured
Streaming query ``PREFIX.events`` → ``PREFIX.events_out`` through the ``metaservice`` source and
sink with ``Trigger.AvailableNow`` (the test has ingested the source's barriers), from the
earliest barrier. Both first run a few Python tasks that report which executor JVM ran them and
what environment they saw, and write everything as JSON to ``RESULT_FILE``, with the rows each
executor wrote through Spark's writers (its tasks' output metrics, from the driver's status
store).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

_EVIDENCE_SOURCE = '''
def where(_rows):
    import os, sys, time
    time.sleep(0.3)  # keep each task busy long enough for both executors to take some
    pid, java, java_parent = os.getpid(), None, None
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        if comm == "java":
            java, java_parent = pid, ppid
            break
        pid = ppid
    args, jvm_env = [], []
    if java is not None:
        with open(f"/proc/{java}/cmdline", "rb") as f:
            args = [a.decode() for a in f.read().split(b"\\0") if a]
        with open(f"/proc/{java}/environ", "rb") as f:
            jvm_env = [e.split(b"=", 1)[0].decode() for e in f.read().split(b"\\0") if e]
    executor = args[args.index("--executor-id") + 1] if "--executor-id" in args else None
    yield {"java_pid": java, "java_parent": java_parent, "executor_id": executor,
           "main": next((a for a in args if a.endswith("CoarseGrainedExecutorBackend")), None),
           "python": sys.executable, "cwd": os.getcwd(),
           "python_env": sorted(os.environ), "jvm_env": sorted(jvm_env)}
'''


def _evidence_probe() -> Any:
    # compiled from source: Spark ships it by value, and it needs nothing of this module
    namespace: dict[str, Any] = {"__name__": "cluster_evidence"}
    exec(compile(_EVIDENCE_SOURCE, "<cluster evidence>", "exec"), namespace)  # noqa: S102
    return namespace["where"]


def session(master: str, app: str) -> Any:
    from metaservice_soak.spark_cluster import driver_builder

    spark = (driver_builder(master, app)
             .config("spark.cores.max", "2")
             # the first job waits until both executors have registered
             .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
             .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def cluster_evidence(spark: Any) -> dict[str, Any]:
    sc = spark.sparkContext
    deadline = time.monotonic() + 120
    while sc._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # the driver and two executors
    tasks = sc.parallelize(range(16), 16).mapPartitions(_evidence_probe()).collect()
    return {"master": sc.master, "python_exec": sc.pythonExec,
            "block_managers": sc._jsc.sc().getExecutorMemoryStatus().size(),
            "executor_ids": sorted(sc._jsc.sc().getExecutorIds().mkString(",").split(",")),
            "driver_pid": os.getpid(), "driver_cwd": os.getcwd(), "tasks": tasks}


def finished_tasks(spark: Any) -> Iterator[tuple[str, Any]]:
    """Every task of the application's stages, with its stage's name (its call site)."""
    sc = spark.sparkContext
    store = sc._jsc.sc().statusStore()
    no_quantiles = sc._gateway.new_array(sc._jvm.double, 0)
    stages = store.stageList(None, False, False, no_quantiles, None)
    for i in range(stages.size()):
        stage = stages.apply(i)
        tasks = store.taskList(stage.stageId(), stage.attemptId(), 100_000)
        for j in range(tasks.size()):
            yield str(stage.name()), tasks.apply(j)


def records_written(spark: Any) -> dict[str, int]:
    """Rows written by Spark's own writers (tasks' ``outputMetrics.recordsWritten``), summed
    by the executor that ran the task (``driver`` in local mode)."""
    written: dict[str, int] = {}
    for _stage, task in finished_tasks(spark):
        if task.taskMetrics().isDefined():
            rows = int(task.taskMetrics().get().outputMetrics().recordsWritten())
            written[task.executorId()] = written.get(task.executorId(), 0) + rows
    return written


def plugin_write_tasks(spark: Any) -> dict[str, int]:
    """Tasks of the stages the plugin's own writers ran on object stores (its JVM writer,
    ``ObjectStoreWriter``, when the plugin's jars are in the session; else ``write_from_tasks``:
    pyiceberg's writer in the Python workers), counted by the executor that ran each task."""
    ran: dict[str, int] = {}
    for stage, task in finished_tasks(spark):
        if (("_spark_io.py" in stage or "ObjectStoreWriter" in stage)
                and str(task.status()) == "SUCCESS"):
            ran[task.executorId()] = ran.get(task.executorId(), 0) + 1
    return ran


def run_batch(spark: Any, prefix: str) -> dict[str, Any]:
    """The README's batch example, on the built-in catalog (found by name: nothing configures
    ``PREFIX``'s catalog)."""
    import spark_plugin as sp

    client = sp.MetaServiceClient()  # $METASERVICE_URL, $METASERVICE_TOKEN
    columns = "order_id long, customer string, amount double"
    sp.create_table_from_spark_schema(f"{prefix}.orders", spark.createDataFrame([], columns),
                                      client=client)
    sp.create_table_from_spark_schema(f"{prefix}.orders_enriched",
                                      spark.createDataFrame([], columns + ", vip boolean"),
                                      client=client)
    batch = spark.createDataFrame([(1 + i, f"c{i % 2}", 60.0 * (i + 1)) for i in range(4)],
                                  columns).repartition(2)
    ingested = sp.append_root(spark, batch, f"{prefix}.orders", client=client)
    steps = []
    with sp.BarrierJob(spark, "enrich", sources=[f"{prefix}.orders"],
                       sinks=[f"{prefix}.orders_enriched"], client=client) as job:
        for step in job.available():
            new_orders = step.read_changes(f"{prefix}.orders")
            step.write(f"{prefix}.orders_enriched",
                       new_orders.withColumn("vip", new_orders.amount > 100))
            commits = step.commit()
            steps.append({"barrier": step.barrier, "full": step.is_full,
                          "snapshots": {t: c.snapshot_id for t, c in commits.items()}})
    client.close()
    return {"ingested_barrier": ingested.barrier, "steps": steps}


def run_stream(spark: Any, prefix: str, checkpoint: str) -> dict[str, Any]:
    import spark_plugin as sp

    job = prefix.split(".", 1)[1] + ".copy"
    listener = sp.register_data_source(spark)  # $METASERVICE_URL, $METASERVICE_TOKEN
    query = (spark.readStream.format("metaservice").option("job", job)
             .option("table", f"{prefix}.events").option("startingBarrier", "earliest").load()
             .selectExpr("id", "amount * 2 + 1 AS amount", "batch")
             .writeStream.format("metaservice").option("job", job)
             .option("table", f"{prefix}.events_out")
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True)
             .start())
    finished = query.awaitTermination(300)
    failure = query.exception()
    if not finished:
        query.stop()
    deadline = time.monotonic() + 30
    while job not in listener.unregistered and time.monotonic() < deadline:
        time.sleep(0.2)
    return {"job": job, "finished": bool(finished),
            "failure": None if failure is None else str(failure)[:2000],
            "batches": [p["batchId"] if isinstance(p, dict) else p.batchId
                        for p in query.recentProgress],
            "unregistered": list(listener.unregistered)}


def main(mode: str, master: str, prefix: str, result_file: str, *rest: str) -> int:
    spark = session(master, f"metaservice-cluster-{mode}")
    try:
        result: dict[str, Any] = {"evidence": cluster_evidence(spark)}
        if mode == "batch":
            result["batch"] = run_batch(spark, prefix)
        elif mode == "stream":
            result["stream"] = run_stream(spark, prefix, rest[0])
        else:
            raise SystemExit(f"unknown mode {mode!r}")
        result["records_written"] = records_written(spark)
        result["plugin_write_tasks"] = plugin_write_tasks(spark)
    finally:
        spark.stop()
    with open(result_file, "w") as out:
        json.dump(result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
