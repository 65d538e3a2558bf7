#!/usr/bin/env bash
# Apache Kafka for the pipeline's Kafka root: Kafka's own broker (KRaft mode; profile kafka of
# engines/pom.xml, run by the tests and the demo from .cache/jars/kafka with the Java that runs
# Spark, metaservice_soak/kafka.py) and Spark's Kafka source for the plugin's Spark (profile
# plugin-kafka, .cache/jars/plugin-kafka: spark-sql-kafka-0-10 at pyspark's version, which a
# job names in spark.jars). Needs Maven and Java 17. Idempotent: does nothing when the jars
# are there.
set -euo pipefail
exec bash "$(dirname "$0")/../fetch-jars.sh" kafka plugin-kafka
