#!/usr/bin/env bash
# Everything the whole test suite runs beside the plugin's own Spark, each installer idempotent
# (a second run does nothing), in the README's test command and CI:
#   engines/spark35/install.sh          Spark 3.5 with Apache Iceberg's runtime (.venv-spark35)
#   engines/spark41/install.sh          Spark 4.1 with Iceberg 1.12's runtime (.venv-spark41)
#   engines/kafka/install.sh            Kafka's broker and Spark's Kafka source for the plugin
#   engines/pyiceberg-suite/install.sh  pyiceberg's own integration suites for REST catalogs
#   engines/plugin-jvm/install.sh       the plugin's JVM source (jvm/), built by Maven
# The installers run at once (one after another they leave the CPUs idle much of the time, pip
# and Maven waiting on the disk and the network), each line of their output prefixed with the
# installer's name. Where they share
# something they take turns (engines/locked.sh): Maven's local repository (engines/fetch-jars.sh)
# and the checkout's metaservice.egg-info/ (the routes' pip install -e .). Every installer runs to
# its end; the script fails, naming each installer that failed, if any did.
# Needs python3, Maven and Java 17.
set -euo pipefail
here=$(dirname "$0")

# run NAME: engines/NAME/install.sh, its output (stderr too) on stdout, each line prefixed.
run() {
    bash "$here/$1/install.sh" 2>&1 | while IFS= read -r line || [ -n "$line" ]; do
        printf '%-15s | %s\n' "$1" "$line"
    done
}

pids=()
for installer in spark35 spark41 kafka pyiceberg-suite plugin-jvm; do
    run "$installer" &
    pids+=("$!:$installer")
done
failed=()
for job in "${pids[@]}"; do
    status=0
    wait "${job%%:*}" || status=$?
    if [ "$status" -ne 0 ]; then
        echo "engines/install.sh: engines/${job#*:}/install.sh failed (exit $status)" >&2
        failed+=("${job#*:}")
    fi
done
if [ "${#failed[@]}" -ne 0 ]; then
    exit 1
fi
