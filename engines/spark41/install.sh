#!/usr/bin/env bash
# Spark 4.1 with Apache Iceberg's own Spark runtime (iceberg-spark-runtime-4.1_2.13 1.12.0, the
# newest Spark line Iceberg publishes a runtime for; pinned with the rest of the route in
# engines/pom.xml, profile spark41): Spark SQL on the catalog from Spark 4 (INSERT, MERGE,
# UPDATE, DELETE carrying a job's barrier; tests/metaservice/catalog/test_spark_sql.py). It
# makes a virtualenv .venv-spark41/ with pyspark 4.1.1 (pyspark is one version per
# environment: the plugin's .venv has 4.2.0, for which no runtime is published yet) and the
# plugin's base install, fetches the route's jars with Maven (engines/fetch-jars.sh spark41:
# .cache/jars/spark41/: the runtime, S3FileIO's AWS bundle, hadoop-aws and its AWS SDK, Spark's
# Kafka source) and names them, with Iceberg's SQL extensions, in that pyspark's
# conf/spark-defaults.conf, so that every SparkSession, pyspark or spark-submit of
# .venv-spark41 has them with no option. Needs python3, Maven and Java 17. Idempotent: does
# nothing when everything is there.
set -euo pipefail
exec bash "$(dirname "$0")/../install-spark-route.sh" spark41 4.1.1
