"""The Spark driver of the Spark 4.1 route's streaming tests, run in its own process (and
process group) by ``.venv-spark41``'s Python, so that a test can kill it, JVM included, with
SIGKILL and start it again from its checkpoint.

    python streaming_driver.py CONFIG.json

``CONFIG.json``: ``{"mode", "master", "jars", "settings", "catalog_uri", "table",
"checkpoint", "input" | "output", "stop_file"}``. The session registers the Iceberg REST catalog
``lake`` at ``catalog_uri`` (Iceberg's own ``SparkCatalog``, as a user's configuration does).

- ``mode: "sink"``: JSON files of ``input`` (``id long, batch long``), one file per
  micro-batch (``maxFilesPerTrigger=1``), appended to ``table`` through Iceberg's own
  streaming sink (``writeStream.format("iceberg").toTable(table)``).
- ``mode: "source"``: ``table`` read with Iceberg's own streaming source
  (``readStream.format("iceberg")``, one data file per micro-batch); each micro-batch's rows
  go to ``output/batch-<id>.json`` (written whole, then renamed: a replayed batch writes the
  same file again).

Runs until ``stop_file`` exists, then stops the query and exits 0; a failed query exits 3.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def session(config: dict):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(config["master"]).appName(f"stream-{config['mode']}")
               .config("spark.jars", ",".join(config["jars"]))
               .config("spark.sql.extensions",
                       "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
               .config("spark.sql.catalog.lake", "org.apache.iceberg.spark.SparkCatalog")
               .config("spark.sql.catalog.lake.type", "rest")
               .config("spark.sql.catalog.lake.uri", config["catalog_uri"])
               .config("spark.sql.catalog.lake.warehouse", "lake")
               .config("spark.sql.catalog.lake.cache-enabled", "false"))
    for key, value in config["settings"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start(spark, config: dict):  # type: ignore[no-untyped-def]
    if config["mode"] == "sink":
        rows = (spark.readStream.format("json").schema("id long, batch long")
                .option("maxFilesPerTrigger", "1").load(config["input"]))
        return (rows.writeStream.format("iceberg").outputMode("append")
                .option("checkpointLocation", config["checkpoint"])
                .trigger(processingTime="500 milliseconds")
                .toTable(config["table"]))
    output = Path(config["output"])

    def write(frame, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        rows = sorted([row.id, row.batch] for row in frame.collect())
        temporary = output / f".batch-{batch_id}.json"
        temporary.write_text(json.dumps(rows))
        temporary.rename(output / f"batch-{batch_id}.json")

    rows = (spark.readStream.format("iceberg")
            .option("streaming-max-files-per-micro-batch", "1").load(config["table"]))
    return (rows.writeStream.foreachBatch(write)
            .option("checkpointLocation", config["checkpoint"])
            .trigger(processingTime="500 milliseconds")
            .start())


def main(path: str) -> int:
    config = json.loads(Path(path).read_text())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = session(config)
    query = start(spark, config)
    print(f"query {query.id} started", flush=True)
    while not Path(config["stop_file"]).exists():
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr, flush=True)
            return 3
        time.sleep(0.2)
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
