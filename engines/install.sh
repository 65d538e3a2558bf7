#!/usr/bin/env bash
# Everything the whole test suite runs beside the plugin's own Spark, each installer idempotent
# (a second run does nothing), in the README's test command and CI:
#   engines/spark35/install.sh          Spark 3.5 with Apache Iceberg's runtime (.venv-spark35)
#   engines/spark41/install.sh          Spark 4.1 with Iceberg 1.12's runtime (.venv-spark41)
#   engines/kafka/install.sh            Kafka's broker and Spark's Kafka source for the plugin
#   engines/plugin-s3/install.sh        Hadoop's S3A for the plugin's Parquet path on s3://
#   engines/pyiceberg-suite/install.sh  pyiceberg's own integration suites for REST catalogs
# Needs python3, Maven and Java 17.
set -euo pipefail
here=$(dirname "$0")
for installer in spark35 spark41 kafka plugin-s3 pyiceberg-suite; do
    bash "$here/$installer/install.sh"
done
