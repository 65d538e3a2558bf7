#!/usr/bin/env bash
# Spark 3.5 with the stock Apache Iceberg Spark runtime, offline: the Spark client of the
# README's "Spark 3.5" section and of the catalog's Spark tests (pytest -m spark_jvm). It makes
# a virtualenv .venv-spark35/ with pyspark 3.5 (it cannot live beside pyspark 4 in .venv) and
# the plugin's base install, and puts in .cache/spark35/ iceberg-spark-runtime-3.5_2.12 1.10.2
# plus a small jar of the classes that copy of the runtime lacks. Both jars and Iceberg's SQL
# extensions go into that pyspark's conf/spark-defaults.conf, so every SparkSession, pyspark or
# spark-submit of .venv-spark35 has the runtime with no option (a job configures only its
# catalogs; with SPARK_HOME set elsewhere, pass the jars in spark.jars instead).
#
# The runtime comes from the PyPI wheel snowpark-connect-deps-iceberg, whose copy leaves out the
# runtime's relocated Jackson and Apache HttpClient 5 classes. They are rebuilt here, offline:
# Jackson 2.18 from the PyPI wheel snowpark-connect-deps-2, httpcore5/httpclient5 5.2 from
# Debian's packages, relocated under org.apache.iceberg.shaded by Relocate.java with the ASM copy
# pyspark ships. Needs python3, Java 17 with javac, and apt-get (no root: `apt-get download`).
# Idempotent: does nothing when everything is there.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYSPARK=3.5.9
ICEBERG_WHEEL=snowpark-connect-deps-iceberg==1.0.3
JACKSON_WHEEL=snowpark-connect-deps-2==3.56.7
JACKSON=2.18.8  # the Jackson jars in that wheel
VENV=.venv-spark35
CACHE=.cache/spark35
RUNTIME=$CACHE/iceberg-spark-runtime-3.5_2.12-1.10.2.jar
EXTRAS=$CACHE/iceberg-spark-runtime-shaded-extras.jar
HERE=engines/spark35

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
ROOT=$PWD

# Spark's defaults for every session of the virtualenv: the runtime and its SQL extensions.
defaults() {
    echo "spark.jars $ROOT/$RUNTIME,$ROOT/$EXTRAS"
    echo "spark.sql.extensions org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
}
spark_defaults() {
    echo "$($VENV/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/conf/spark-defaults.conf"
}
have_defaults() {
    have_pyspark && [ "$(cat "$(spark_defaults)" 2>/dev/null)" = "$(defaults)" ]
}

if have_pyspark && have_plugin && [ -s $RUNTIME ] && [ -s $EXTRAS ] && have_defaults; then
    echo "install spark35: pyspark $PYSPARK in $VENV, Iceberg runtime in $CACHE"
    exit 0
fi

for tool in java javac jar; do
    if ! command -v $tool >/dev/null; then
        echo "install spark35: $tool is missing (install a Java 17 or 21 JDK)" >&2
        exit 1
    fi
done
if ! have_pyspark; then
    python3 -m venv $VENV
    $VENV/bin/pip install -q "pyspark==$PYSPARK"
fi
if ! have_plugin; then
    $VENV/bin/pip install -q -e .
fi

mkdir -p $CACHE
WORK=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

if [ ! -s $RUNTIME ]; then
    $VENV/bin/pip download -q --no-deps -d "$WORK" "$ICEBERG_WHEEL"
    (cd "$WORK" && jar xf snowpark_connect_deps_iceberg-*.whl \
        snowpark_connect_deps_iceberg/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar)
    mv "$WORK"/snowpark_connect_deps_iceberg/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar $RUNTIME
fi

if [ ! -s $EXTRAS ]; then
    $VENV/bin/pip download -q --no-deps -d "$WORK" "$JACKSON_WHEEL"
    (cd "$WORK" && jar xf snowpark_connect_deps_2-*.whl \
        snowpark_connect_deps_2/jars/jackson-{annotations,core,databind}-$JACKSON.jar)
    mkdir -p "$WORK/jars"
    mv "$WORK"/snowpark_connect_deps_2/jars/jackson-*.jar "$WORK/jars/"
    if ! (cd "$WORK" && apt-get download -qq libhttpcore5-java libhttpclient5-java 2>/dev/null); then
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo  # no package lists yet
        $SUDO apt-get update -q
        (cd "$WORK" && apt-get download -qq libhttpcore5-java libhttpclient5-java)
    fi
    for deb in "$WORK"/*.deb; do dpkg -x "$deb" "$WORK/deb"; done
    cp "$WORK"/deb/usr/share/java/{httpcore5,httpcore5-h2,httpclient5}.jar "$WORK/jars/"
    ASM=$(ls $VENV/lib/python3*/site-packages/pyspark/jars/xbean-asm9-shaded-*.jar)
    javac -d "$WORK/classes" -cp "$ASM" $HERE/Relocate.java
    java -cp "$WORK/classes:$ASM" Relocate "$WORK/extras.jar" "$WORK"/jars/*.jar
    mv "$WORK/extras.jar" $EXTRAS
fi

CONF=$(spark_defaults)
mkdir -p "$(dirname "$CONF")"
defaults > "$CONF"
echo "install spark35: pyspark $PYSPARK in $VENV, Iceberg runtime in $CACHE"
