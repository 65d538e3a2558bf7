"""One SparkSession with the stock Iceberg runtime, driven over a pipe by the catalog's Spark
tests. Runs in a Spark route's virtualenv (``install.sh`` of spark35 or spark41), not in the
project's.

    python driver.py [--master URL] [--conf KEY=VALUE]... JAR...
    python driver.py [--master URL] [--conf KEY=VALUE]... --packages GROUP:ARTIFACT:VERSION[,...]

The session runs on ``local[2]`` unless ``--master`` names another (a standalone cluster's
``spark://host:port``); each ``--conf`` is one more setting of the session. With jars, the
session puts them on its classpath (``spark.jars``, which also ships them to a cluster's
executors); with ``--packages`` it leaves out the jars of ``spark-defaults.conf`` and has Spark
fetch the coordinates itself (``spark.jars.packages``, as a user's Spark does: Maven's local
repository first, then Maven Central).

Each line on stdin is a JSON command; each answers one JSON line on stdout:

- ``{"op": "catalog", "name": N, "options": {...}}`` registers the Iceberg catalog N
  (``spark.sql.catalog.N`` and its options), as a Spark configuration file would;
- ``{"op": "sql", "sql": S}`` answers ``{"rows": [[...], ...]}``;
- ``{"op": "executors"}`` answers the session's master and, for each executor the driver has
  seen (the driver itself included, as ``driver``), ``{"id", "host_port", "tasks"}``: the tasks
  it completed or failed so far, from Spark's own status store;
- ``{"op": "open_read_session", "name": N, "catalog": C, "at": A}`` runs
  ``spark_plugin.open_read_session(spark, N, catalog=C, at=A)`` (the plugin's base install);
- ``{"op": "append", "table": T, "schema": DDL, "rows": [[...]], "options": {...}}`` runs
  ``createDataFrame(rows, schema).writeTo(T).options(**options).append()``;
- ``{"op": "overwrite_partitions", ...}``: the same with ``overwritePartitions()``;
- ``{"op": "append_query", "table": T, "query": S, "options": {...}}`` runs
  ``spark.sql(S).writeTo(T).options(**options).append()``: rows made by Spark itself (e.g.
  ``SELECT ... FROM range(N)``), none of them through the pipe.

A failure answers ``{"error": {"type": ..., "message": ...}}`` and the session goes on. The
first line out is ``{"ready": true, "start_seconds": S}`` once the session has started.
"""

import json
import os
import sys
import time
import traceback

replies = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # the JVM and Spark print to stdout: keep it for the answers only

from pyspark.sql import SparkSession  # noqa: E402


def answer(message: dict) -> None:
    replies.write(json.dumps(message, default=str) + "\n")
    replies.flush()


def run(spark: SparkSession, command: dict) -> dict:
    op = command["op"]
    if op == "catalog":
        prefix = f"spark.sql.catalog.{command['name']}"
        spark.conf.set(prefix, "org.apache.iceberg.spark.SparkCatalog")
        for key, value in command["options"].items():
            spark.conf.set(f"{prefix}.{key}", value)
        return {}
    if op == "sql":
        return {"rows": [list(row) for row in spark.sql(command["sql"]).collect()]}
    if op == "executors":
        store = spark.sparkContext._jsc.sc().statusStore()  # noqa: SLF001 - Spark's own record
        summaries = store.executorList(False)
        executors = []
        for i in range(summaries.size()):
            summary = summaries.apply(i)
            executors.append({"id": summary.id(), "host_port": summary.hostPort(),
                              "tasks": summary.completedTasks() + summary.failedTasks()})
        return {"master": spark.sparkContext.master, "executors": executors}
    if op == "open_read_session":
        import spark_plugin

        return {"name": spark_plugin.open_read_session(spark, command["name"],
                                                       catalog=command["catalog"],
                                                       at=command["at"])}
    if op in ("append", "overwrite_partitions"):
        frame = spark.createDataFrame([tuple(r) for r in command["rows"]], command["schema"])
        writer = frame.writeTo(command["table"]).options(**command.get("options", {}))
        writer.append() if op == "append" else writer.overwritePartitions()
        return {}
    if op == "append_query":
        frame = spark.sql(command["query"])
        frame.writeTo(command["table"]).options(**command.get("options", {})).append()
        return {}
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    started = time.monotonic()
    arguments, master, settings = sys.argv[1:], "local[2]", {}
    while arguments[:1] in (["--master"], ["--conf"]):
        option, value, arguments = arguments[0], arguments[1], arguments[2:]
        if option == "--master":
            master = value
        else:
            key, _, setting = value.partition("=")
            settings[key] = setting
    builder = SparkSession.builder
    if arguments[:1] == ["--packages"]:
        builder = builder.config("spark.jars", "").config("spark.jars.packages", arguments[1])
    else:
        builder = builder.config("spark.jars", ",".join(arguments))
    builder = (builder.master(master).appName("metaservice-catalog-tests")
               .config("spark.sql.extensions",
                       "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    for key, setting in settings.items():
        builder = builder.config(key, setting)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    start_seconds = round(time.monotonic() - started, 2)
    print(f"driver: SparkSession started in {start_seconds:.2f}s", file=sys.stderr, flush=True)
    answer({"ready": True, "start_seconds": start_seconds})
    for line in sys.stdin:
        command, began = json.loads(line), time.monotonic()
        try:
            answer(run(spark, command))
        except Exception as exc:  # noqa: BLE001 - every failure is an answer
            message = str(exc) or traceback.format_exc()
            answer({"error": {"type": type(exc).__name__, "message": message[:8000]}})
        print(f"driver: {time.monotonic() - began:.2f}s {json.dumps(command)[:160]}",
              file=sys.stderr, flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
