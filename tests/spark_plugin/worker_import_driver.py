"""A Spark driver whose Python workers run another interpreter, for the worker import test.

    python worker_import_driver.py ROOT WORKER_PYTHON SERVER_URL TABLE_PREFIX

The plugin is put on this process's ``sys.path`` (not on ``PYTHONPATH``, which Spark hands to
its workers), and ``PYSPARK_PYTHON`` is ``WORKER_PYTHON``; ``spark.pyspark.python``, set on the
session builder to this interpreter (which has the plugin), is ignored by pyspark and must be
named so in the error. Prints one line per check:
``register_data_source: <error class>|<python>|<reason>``, then ``barrier_job: ok`` when a
BarrierJob on unpartitioned tables of a local warehouse (which runs no plugin code on workers)
still works on such a session, then ``partitioned_write: <error class>`` for an append to a
partitioned table (written by pyiceberg in Spark's tasks).
"""

from __future__ import annotations

import os
import sys


def main(root: str, worker_python: str, url: str, prefix: str) -> int:
    sys.path.insert(0, root)
    os.environ.pop("PYTHONPATH", None)
    os.environ["PYSPARK_PYTHON"] = worker_python
    from pyspark.sql import SparkSession

    import spark_plugin as sp

    spark = (SparkSession.builder.master("local[1]").appName("worker-import")
             .config("spark.ui.enabled", "false")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        sp.register_data_source(spark, url=url)
        print("register_data_source: ok", flush=True)
    except sp.MetaServiceError as exc:
        print(f"register_data_source: {type(exc).__name__}|{getattr(exc, 'python', '')}|"
              f"{getattr(exc, 'reason', '')}", flush=True)
        print(f"message: {exc}", flush=True)
    client = sp.MetaServiceClient(url)
    df = spark.createDataFrame([(1, 1.0), (2, 2.0)], "id long, amount double")
    root, sink = f"{prefix}.events", f"{prefix}.out"
    for t in (root, sink):
        sp.create_table_from_spark_schema(t, df.schema, client=client)
    sp.append_root(spark, df, root, client=client, barrier=1_000)
    with sp.BarrierJob(spark, f"{prefix.rsplit('.', 1)[1]}.copy", [root], [sink],
                       client=client) as job:
        step = job.next()
        step.write(sink, step.read(root))
        step.commit()
    print("barrier_job: ok", flush=True)
    sp.create_table_from_spark_schema(f"{prefix}.by_id", df.schema, client=client,
                                      partition_by=["id"])
    try:
        sp.append_root(spark, df, f"{prefix}.by_id", client=client, barrier=1_000)
        print("partitioned_write: ok", flush=True)
    except sp.MetaServiceError as exc:
        print(f"partitioned_write: {type(exc).__name__}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
