"""Ingest orders, enrich them in a batch job, read both tables at one consistent cut.

    python examples/spark_batch_job.py [--url URL]

The tables live in the server's built-in Iceberg catalog `lake` (<url>/iceberg), the one every
engine and the dashboard see. Without --url (or $METASERVICE_URL) a `metaservice serve` is
started for the run, with its database and warehouse in a temporary directory; against a running
server they stay in its warehouse. Each run ingests four new orders; the job processes what is
available and returns.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import httpx
from pyspark.sql import SparkSession

import spark_plugin as sp


def start_server(directory: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    env = {**os.environ, "METASERVICE_DATABASE_URL": f"sqlite:///{directory}/metaservice.db",
           "METASERVICE_WAREHOUSE": f"{directory}/warehouse"}
    with open(f"{directory}/server.log", "wb") as log:  # the server's log, not on the console
        server = subprocess.Popen([sys.executable, "-m", "metaservice", "serve",
                                   "--port", url.rsplit(":", 1)[1]], env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                return server, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    server.kill()
    raise RuntimeError("metaservice serve did not become ready")


def run(url: str) -> None:
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    client = sp.MetaServiceClient(url)
    # the server's catalog: its commits complete their barriers in the server's transaction
    catalog = sp.CatalogSpec.metaservice("lake", url, os.environ.get("METASERVICE_TOKEN")).load()

    columns = "order_id long, customer string, amount double"
    orders = sp.create_table_from_spark_schema(
        "lake.db.orders", spark.createDataFrame([], columns), catalog=catalog, exist_ok=True)
    sp.create_table_from_spark_schema(
        "lake.db.orders_enriched", spark.createDataFrame([], columns + ", vip boolean"),
        catalog=catalog, exist_ok=True)
    first = orders.scan().count() + 1
    batch = spark.createDataFrame([(first + i, f"c{i % 2}", 60.0 * (i + 1)) for i in range(4)],
                                  columns)
    commit = sp.append_root(spark, batch, "lake.db.orders", client=client, catalog=catalog)
    print(f"ingested orders {first}..{first + 3} at barrier {commit.barrier}")

    with sp.BarrierJob(spark, "enrich", sources=["lake.db.orders"],
                       sinks=["lake.db.orders_enriched"], client=client, catalog=catalog) as job:
        for step in job.available():                      # what is there now, then the loop ends
            new_orders = step.read_changes("lake.db.orders")   # appended since the last barrier
            step.write("lake.db.orders_enriched",              # a full step replaces the sink
                       new_orders.withColumn("vip", new_orders.amount > 100))
            step.commit()                                  # one tagged Iceberg commit, reported
            print(f"enrich committed barrier {step.barrier} (full: {step.is_full})")

    with sp.consistent_read(spark, ["lake.db.orders", "lake.db.orders_enriched"],
                            client=client, catalog=catalog) as frames:  # leased in the block
        both = frames["lake.db.orders"].join(frames["lake.db.orders_enriched"], "order_id")
        print(f"at one strong cut: {frames['lake.db.orders'].count()} orders, "
              f"{both.count()} of them enriched")
    client.close()
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("METASERVICE_URL"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="metaservice-example-") as scratch:
        server, url = start_server(scratch) if args.url is None else (None, args.url)
        try:
            run(url)
        finally:
            if server is not None:
                server.terminate()
                server.wait()


if __name__ == "__main__":
    main()
