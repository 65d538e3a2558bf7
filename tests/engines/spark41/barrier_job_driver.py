"""A ``BarrierJob`` of the plugin on the Spark 4.1 route: its catalog is Iceberg's own
``SparkCatalog`` in the session, so the job reads each barrier's snapshots and commits its sinks
through Iceberg's runtime (``spark_plugin._runtime_io``). Run by ``.venv-spark41/bin/python`` in
its own process group:

    python barrier_job_driver.py RUNTIME_JAR URL CATALOG JOB SOURCE DOUBLED LARGE

Every barrier available: ``DOUBLED`` gets the source's new rows with ``amount * 2``, ``LARGE``
those with ``amount >= 50``. Prints one JSON line per committed step. The test kills it at a
crash point (``METASERVICE_PLUGIN_CRASH_AT=after_sink_commit@1``: after the first sink's commit
of the first step, the second sink's not made).
"""

from __future__ import annotations

import json
import os
import sys


def main(runtime: str, url: str, catalog: str, job: str, source: str, doubled: str,
         large: str) -> int:
    if os.environ.get("METASERVICE_PLUGIN_CRASH_AT"):
        os.environ["METASERVICE_PLUGIN_CRASH_PGID"] = str(os.getpgrp())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_plugin as sp

    prefix = f"spark.sql.catalog.{catalog}"
    spark = (SparkSession.builder.master("local[2]").appName("runtime-barrier-job")
             .config("spark.jars", runtime)
             .config(prefix, "org.apache.iceberg.spark.SparkCatalog")
             .config(f"{prefix}.type", "rest")
             .config(f"{prefix}.uri", f"{url}/iceberg")
             .config(f"{prefix}.warehouse", catalog)
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    client = sp.MetaServiceClient(url)
    with sp.BarrierJob(spark, job, sources=[source], sinks=[doubled, large],
                       client=client) as barrier_job:
        for step in barrier_job.available():
            rows = step.read_changes(source)
            step.write(doubled, rows.selectExpr("id", "amount * 2 AS amount"))
            step.write(large, rows.where("amount >= 50"))
            commits = step.commit()
            print(json.dumps({"barrier": step.barrier, "full": step.is_full,
                              "commits": {t: c.snapshot_id for t, c in commits.items()}}),
                  flush=True)
    client.close()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:8]))
