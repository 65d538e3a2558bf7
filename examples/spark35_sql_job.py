"""A Spark SQL job through the built-in catalog, then a join at one barrier in a read session.

    .venv-spark35/bin/python examples/spark35_sql_job.py

Spark 3.5 with Apache Iceberg's runtime (engines/spark35/install.sh puts it in that
virtualenv's spark-defaults.conf), against `metaservice serve` at $METASERVICE_URL (default
http://127.0.0.1:8000). No MetaService code runs in Spark: the job is two catalogs and two
snapshot properties; the plan, start and end of the job are HTTP calls. Each run starts afresh
(it ends a job left by an earlier run and drops its tables) and prints the same.
"""

import os

import httpx
from pyspark.sql import SparkSession

URL = os.environ.get("METASERVICE_URL", "http://127.0.0.1:8000")

builder = SparkSession.builder.master("local[2]").config("spark.ui.showConsoleProgress", "false")
for name, warehouse in (("lake", "lake"), ("lake_strong", "lake@strong")):  # head, read session
    builder = (builder.config(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
               .config(f"spark.sql.catalog.{name}.type", "rest")
               .config(f"spark.sql.catalog.{name}.uri", f"{URL}/iceberg")
               .config(f"spark.sql.catalog.{name}.warehouse", warehouse))
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")

httpx.post(f"{URL}/unregister/totals")  # an earlier run's job, if any (404 when none)
spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.sales")
for table in ("orders", "totals"):  # an earlier run's tables, data files and history
    spark.sql(f"DROP TABLE IF EXISTS lake.sales.{table} PURGE")
spark.sql("CREATE TABLE lake.sales.orders (id bigint, amount bigint) USING iceberg")
spark.sql("CREATE TABLE lake.sales.totals (orders bigint, amount bigint) USING iceberg")
spark.sql("INSERT INTO lake.sales.orders VALUES (1, 10), (2, 20)")  # a root: completes a barrier

# The job `totals` plans its source and sink, starts, and is handed a barrier B with the
# snapshot of its source to read; its commit carries B (and its name) as snapshot properties.
for role, table in (("source", "orders"), ("sink", "totals")):
    httpx.post(f"{URL}/register/{role}/totals/lake/sales/{table}").raise_for_status()
step = httpx.post(f"{URL}/jobs/totals/start").json()
barrier, orders = step["barrier"], step["snapshots"]["lake.sales.orders"]
(spark.sql(f"SELECT count(*) AS orders, sum(amount) AS amount "
           f"FROM lake.sales.orders VERSION AS OF {orders}")
 .writeTo("lake.sales.totals")
 .option("snapshot-property.metaservice.job", "totals")
 .option("snapshot-property.metaservice.barrier", str(barrier)).append())

spark.sql("INSERT INTO lake.sales.orders VALUES (3, 30)")  # an order the job has not seen yet

JOIN = """SELECT o.orders, t.orders AS counted
          FROM (SELECT count(*) AS orders FROM {c}.sales.orders) o, {c}.sales.totals t"""
head = spark.sql(JOIN.format(c="lake")).first()
print(f"head: {head.orders} orders, totals counted {head.counted}")
strong = spark.sql(JOIN.format(c="lake_strong")).first()  # both tables at the job's barrier
print(f"strong read session: {strong.orders} orders, totals counted {strong.counted}")

try:
    spark.sql("INSERT INTO lake_strong.sales.orders VALUES (4, 40)")
except Exception as refused:  # noqa: BLE001 - shown
    # pyspark 3.5 puts "An error occurred while calling oNN.sql." first; the reason follows
    reason = next(line for line in str(refused).splitlines() if "Exception:" in line)
    print("write through the read session refused:", reason.split("Exception: ", 1)[-1])
httpx.post(f"{URL}/unregister/totals").raise_for_status()  # the job ends: it unregisters
spark.stop()
