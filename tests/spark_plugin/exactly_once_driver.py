"""The Spark driver of the exactly-once test, run in its own process (and process group).

    python exactly_once_driver.py URL JOB SOURCE SINK CHECKPOINT STOP_FILE [SOURCE_FORMAT]

Runs one streaming query, ``SOURCE`` → ``id, amount * 2 + 1, batch`` → ``SINK``, through the
``metaservice`` source (or ``SOURCE_FORMAT``: ``metaservice_native``, its jar on the driver's
classpath) and the ``metaservice`` sink, until ``STOP_FILE`` exists; then stops it (the listener
unregisters the job) and exits 0. A ``SOURCE`` of the form ``kafka://HOST:PORT/TOPIC`` is
a Kafka topic read with Spark's own Kafka source (its jars from ``.cache/jars/plugin-kafka``, a
few offsets per micro-batch): ``partition, offset, id`` (the message's value as a number) →
``SINK``, a root table of a job without ``metaservice`` sources. The test kills it instead at a
crash point (``METASERVICE_PLUGIN_CRASH_AT``): this process then dies with SIGKILL, JVM and
workers included.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKA_JARS = ROOT / ".cache" / "jars" / "plugin-kafka"
KAFKA_OFFSETS_PER_BATCH = 4


def main(url: str, job: str, source: str, sink: str, checkpoint: str, stop_file: str,
         source_format: str = "metaservice") -> int:
    if os.environ.get("METASERVICE_PLUGIN_CRASH_AT"):
        os.environ["METASERVICE_PLUGIN_CRASH_PGID"] = str(os.getpgrp())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_plugin as sp
    from spark_plugin.streaming import register_data_source

    builder = SparkSession.builder
    if source_format == "metaservice_native":
        from spark_plugin.streaming import native_source_jar

        builder = builder.config("spark.jars", native_source_jar())
    if source.startswith("kafka://"):
        builder = builder.config("spark.jars", ",".join(
            str(jar) for jar in sorted(KAFKA_JARS.glob("*.jar"))))
    spark = (builder.master("local[2]").appName("exactly-once-driver")
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
    if source.startswith("kafka://"):
        bootstrap, _, topic = source.removeprefix("kafka://").partition("/")
        rows = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", str(KAFKA_OFFSETS_PER_BATCH)).load()
                .selectExpr("CAST(partition AS BIGINT) AS partition", "offset",
                            "CAST(CAST(value AS STRING) AS BIGINT) AS id"))
    else:
        rows = (spark.readStream.format(source_format).option("metaservice.url", url)
                .option("job", job).option("table", source).load()
                .selectExpr("id", "amount * 2 + 1 AS amount", "batch"))
    query = (rows.writeStream.format("metaservice").option("metaservice.url", url)
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
    sys.exit(main(*sys.argv[1:8]))
