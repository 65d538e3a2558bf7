"""The Spark driver of the exactly-once test, run in its own process (and process group).

    python exactly_once_driver.py URL JOB SOURCE SINK CHECKPOINT STOP_FILE

Runs one streaming query, ``SOURCE`` → ``id, amount * 2 + 1, batch`` → ``SINK``, through the
``metaservice`` source and sink, until ``STOP_FILE`` exists; then stops it (the listener
unregisters the job) and exits 0. The test kills it instead at a crash point
(``METASERVICE_PLUGIN_CRASH_AT``): this process then dies with SIGKILL, JVM and workers included.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main(url: str, job: str, source: str, sink: str, checkpoint: str, stop_file: str) -> int:
    if os.environ.get("METASERVICE_PLUGIN_CRASH_AT"):
        os.environ["METASERVICE_PLUGIN_CRASH_PGID"] = str(os.getpgrp())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_plugin as sp
    from spark_plugin.streaming import register_data_source

    spark = (SparkSession.builder.master("local[2]").appName("exactly-once-driver")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.adaptive.enabled", "false")
             # a short-lived driver: the client compiler and a serial GC start twice as fast
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register_data_source(spark, url=url)
    query = (spark.readStream.format("metaservice").option("metaservice.url", url)
             .option("job", job).option("table", source).load()
             .selectExpr("id", "amount * 2 + 1 AS amount", "batch")
             .writeStream.format("metaservice").option("metaservice.url", url)
             .option("job", job).option("table", sink)
             .option("checkpointLocation", checkpoint)
             .start())
    print("query started", flush=True)
    while not Path(stop_file).exists():
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr, flush=True)
            return 3
        time.sleep(0.2)
    query.stop()
    client = sp.MetaServiceClient(url)
    deadline = time.monotonic() + 30
    while client.get_job(job)["state"] != "terminated" and time.monotonic() < deadline:
        time.sleep(0.2)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:7]))
