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
cd "$(dirname "$0")/../.."

PYSPARK=4.1.1
VENV=.venv-spark41
JARS=.cache/jars/spark41
ROOT=$PWD

have_pyspark() {
    [ -x $VENV/bin/python ] && $VENV/bin/python -c \
        "import sys, pyspark; sys.exit(pyspark.__version__ != '$PYSPARK')" 2>/dev/null
}

# The plugin's base install (client and plugin, no server), editable, from this checkout.
have_plugin() {
    (cd / && $ROOT/$VENV/bin/python -c "import spark_plugin, sys; \
        sys.exit(not spark_plugin.__file__.startswith('$ROOT/'))") 2>/dev/null
}

defaults() {
    echo "spark.jars $(ls "$ROOT"/$JARS/*.jar | paste -sd, -)"
    echo "spark.sql.extensions org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
}
spark_defaults() {
    echo "$($VENV/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/conf/spark-defaults.conf"
}

bash engines/fetch-jars.sh spark41
if ! have_pyspark; then
    python3 -m venv $VENV
    $VENV/bin/pip install -q "pyspark==$PYSPARK"
fi
if ! have_plugin; then
    $VENV/bin/pip install -q -e .
fi
CONF=$(spark_defaults)
if [ "$(cat "$CONF" 2>/dev/null)" != "$(defaults)" ]; then
    mkdir -p "$(dirname "$CONF")"
    defaults > "$CONF"
fi
echo "install spark41: pyspark $PYSPARK in $VENV, Iceberg's runtime and the route's jars from $JARS"
