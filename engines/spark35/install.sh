#!/usr/bin/env bash
# Spark 3.5 with Apache Iceberg's own Spark runtime (iceberg-spark-runtime-3.5_2.12, from Maven
# Central, pinned in engines/pom.xml): the Spark client of the README's "Spark 3.5" section and
# of the catalog's Spark tests (pytest -m spark_jvm). It makes a virtualenv .venv-spark35/ with
# pyspark 3.5 (it cannot live beside pyspark 4 in .venv) and the plugin's base install, fetches
# the runtime with Maven (engines/fetch-jars.sh spark35: .cache/jars/spark35/) and names it,
# with Iceberg's SQL extensions, in that pyspark's conf/spark-defaults.conf, so every
# SparkSession, pyspark or spark-submit of .venv-spark35 has the runtime with no option (a job
# configures only its catalogs; with SPARK_HOME set elsewhere, pass the jar in spark.jars, or
# let Spark fetch it: spark.jars.packages=org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2).
# Needs python3, Maven and Java 17. Idempotent: does nothing when everything is there.
set -euo pipefail
exec bash "$(dirname "$0")/../install-spark-route.sh" spark35 3.5.9
