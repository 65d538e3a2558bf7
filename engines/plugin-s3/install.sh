#!/usr/bin/env bash
# Hadoop's S3A filesystem for the plugin's Spark (pyspark 4.2.0, the `spark` extra): hadoop-aws at
# the Hadoop inside pyspark's jars/ and the AWS SDK v2 bundle that Hadoop release names (profile
# plugin-s3 of engines/pom.xml, into .cache/jars/plugin-s3). With them on the driver's and the
# executors' classpath (spark.driver.extraClassPath and spark.executor.extraClassPath
# '.cache/jars/plugin-s3/*', or spark.jars), the plugin's native Parquet path reads and writes
# tables on s3:// with the credentials the catalog vends (spark_plugin/_s3a.py). Needs Maven and
# Java 17. Idempotent: does nothing when the jars are there.
set -euo pipefail
exec bash "$(dirname "$0")/../fetch-jars.sh" plugin-s3
