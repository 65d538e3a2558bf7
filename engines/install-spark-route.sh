#!/usr/bin/env bash
# One Spark route with Apache Iceberg's own Spark runtime (engines/spark35/install.sh and
# engines/spark41/install.sh call it): a virtualenv .venv-ROUTE with pyspark PYSPARK (pyspark is
# one version per environment: the plugin's .venv has its own) and the plugin's base install
# (editable, from this checkout), the route's jars fetched by Maven (engines/fetch-jars.sh
# ROUTE: .cache/jars/ROUTE/) and named, with Iceberg's SQL extensions, in that pyspark's
# conf/spark-defaults.conf, so that every SparkSession, pyspark or spark-submit of the
# virtualenv has them with no option. Its bin/activate sets SPARK_HOME to that pyspark: else
# pyspark's bin/ scripts (spark-sql, spark-submit) find their Spark through $PYSPARK_PYTHON
# when it is set, which may be another virtualenv's (the plugin's .venv, with another Spark).
# Needs python3, Maven and Java 17. Idempotent: does nothing when everything is there.
#
#   bash engines/install-spark-route.sh ROUTE PYSPARK
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$#" -ne 2 ] || [ ! -f "engines/$1/install.sh" ]; then
    echo "usage: bash engines/install-spark-route.sh ROUTE PYSPARK (a route: engines/*/install.sh)" >&2
    exit 2
fi
ROUTE=$1
PYSPARK=$2
VENV=.venv-$ROUTE
JARS=.cache/jars/$ROUTE
ROOT=$PWD

have_pyspark() {
    [ -x $VENV/bin/python ] && $VENV/bin/python -c \
        "import sys, pyspark; sys.exit(pyspark.__version__ != '$PYSPARK')" 2>/dev/null
}

have_plugin() {
    # every package the plugin imports from this checkout (an older editable install lacks one
    # added since)
    (cd / && $ROOT/$VENV/bin/python -c "import spark_plugin, metaservice_names, sys; \
        sys.exit(not all(m.__file__.startswith('$ROOT/') \
                         for m in (spark_plugin, metaservice_names)))") 2>/dev/null
}

defaults() {
    echo "spark.jars $(ls "$ROOT"/$JARS/*.jar | paste -sd, -)"
    echo "spark.sql.extensions org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
}
spark_defaults() {
    echo "$($VENV/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/conf/spark-defaults.conf"
}

if ! have_pyspark; then
    python3 -m venv $VENV
    $VENV/bin/pip install -q "pyspark==$PYSPARK"
fi
if ! have_plugin; then
    # pip install -e . writes the checkout's metaservice.egg-info/ (setuptools' egg_info): one
    # at a time (engines/install.sh installs both routes at once). The plugin's dependencies
    # first, outside the lock (pip's own resolution then finds them there).
    DEPENDENCIES=$($VENV/bin/python -c 'import tomllib
print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")')
    $VENV/bin/pip install -q -r /dev/stdin <<< "$DEPENDENCIES"
    bash engines/locked.sh .cache/editable-install.lock $VENV/bin/pip install -q -e .
fi
bash engines/fetch-jars.sh "$ROUTE"
CONF=$(spark_defaults)
if [ "$(cat "$CONF" 2>/dev/null)" != "$(defaults)" ]; then
    mkdir -p "$(dirname "$CONF")"
    defaults > "$CONF"
fi
HOME_LINE="export SPARK_HOME=\"$(dirname "$CONF" | xargs dirname)\"  # this route's Spark"
if ! grep -qxF "$HOME_LINE" $VENV/bin/activate; then
    echo "$HOME_LINE" >> $VENV/bin/activate
fi
echo "install $ROUTE: pyspark $PYSPARK in $VENV, Iceberg's runtime and the route's jars from $JARS"
