#!/usr/bin/env bash
# The plugin's JVM part (jvm/: the `metaservice_native` streaming source, the writer of tables
# on an object store), built by Maven against the Spark of the plugin's pyspark, into
# .cache/jars/plugin-jvm/metaservice-spark-plugin.jar, beside the AWS SDK bundle the writer
# needs (iceberg-aws-bundle-<v>.jar); a job names both in spark.jars
# (spark_plugin.plugin_jars()). Needs Maven and
# Java 17. Idempotent: does nothing when the jar was built from the same sources; Maven runs
# holding the lock of its local repository (engines/locked.sh), as engines/fetch-jars.sh does.
set -euo pipefail
cd "$(dirname "$0")/../.."

target=.cache/jars/plugin-jvm
stamp=$target/.built-from
digest=$( (cat engines/pom.xml; find jvm/pom.xml jvm/src -type f | LC_ALL=C sort | xargs cat) \
    | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
    echo "plugin-jvm: $target/metaservice-spark-plugin.jar is up to date"
    exit 0
fi
if ! command -v mvn >/dev/null; then
    echo "plugin-jvm: mvn is missing (Debian's maven package, with a Java 17 or 21 JDK)" >&2
    exit 1
fi
if [ -z "${PLUGIN_JVM_LOCKED:-}" ]; then
    export PLUGIN_JVM_LOCKED=1
    exec bash engines/locked.sh "${MAVEN_REPO_LOCAL:-$HOME/.m2/repository}/.fetch-jars.lock" \
        bash engines/plugin-jvm/install.sh
fi
MAVEN=(mvn -B -q -Dstyle.color=never -f jvm/pom.xml)
if [ -n "${MAVEN_REPO_LOCAL:-}" ]; then
    MAVEN+=("-Dmaven.repo.local=$MAVEN_REPO_LOCAL")
fi
start=$SECONDS
# the build's output stays out of the source tree (jvm/target would be a second copy)
"${MAVEN[@]}" -DbuildDirectory="$PWD/.cache/build/plugin-jvm" package
rm -rf "$target"
mkdir -p "$target"
cp .cache/build/plugin-jvm/metaservice-spark-plugin.jar .cache/build/plugin-jvm/runtime/*.jar \
    "$target/"
echo "$digest" > "$stamp"
echo "plugin-jvm: built $target/metaservice-spark-plugin.jar ($((SECONDS - start)) s)"
