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
cd "$(dirname "$0")/../.."

PYSPARK=3.5.9
VENV=.venv-spark35
JARS=.cache/jars/spark35
ROOT=$PWD

have_pyspark() {
    [ -x $VENV/bin/python ] && $VENV/bin/python -c \
        "import sys, pyspark; sys.exit(pyspark.__version__ != '$PYSPARK')" 2>/dev/null
}

# The plugin's base install (client and plugin, no server), as a Spark 3.5 user has it: the
# tests call spark_plugin.open_read_session there. Editable, from this checkout.
have_plugin() {
    (cd / && $ROOT/$VENV/bin/python -c "import spark_plugin, sys; \
        sys.exit(not spark_plugin.__file__.startswith('$ROOT/'))") 2>/dev/null
}

# Spark's defaults for every session of the virtualenv: the runtime and its SQL extensions.
defaults() {
    echo "spark.jars $(ls "$ROOT"/$JARS/*.jar | paste -sd, -)"
    echo "spark.sql.extensions org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
}
spark_defaults() {
    echo "$($VENV/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/conf/spark-defaults.conf"
}

bash engines/fetch-jars.sh spark35
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
echo "install spark35: pyspark $PYSPARK in $VENV, Iceberg's runtime from $JARS"
