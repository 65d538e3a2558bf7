#!/usr/bin/env bash
# Fetches the jars of the routes named (profiles of engines/pom.xml, which declares every JVM
# dependency of the project, pinned) with Maven into its local repository (~/.m2, or
# MAVEN_REPO_LOCAL), and copies each profile's jars into .cache/jars/<profile>/, where that
# route's Spark or JUnit finds them. Nothing is built. Idempotent: a profile whose jars were
# copied from the same engines/pom.xml is left alone without starting Maven.
#
#   bash engines/fetch-jars.sh spark35 [spark41 plugin-kafka plugin-s3 kafka rck]
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$#" -eq 0 ]; then
    echo "usage: bash engines/fetch-jars.sh PROFILE... (profiles of engines/pom.xml:" \
         "spark35 spark41 plugin-kafka plugin-s3 kafka rck)" >&2
    exit 2
fi
if ! command -v mvn >/dev/null; then
    echo "fetch-jars: mvn is missing (Debian's maven package, with a Java 17 or 21 JDK)" >&2
    exit 1
fi

POM=engines/pom.xml
DIGEST=$(sha256sum "$POM" | cut -d' ' -f1)
MAVEN=(mvn -B -q -Dstyle.color=never -f "$POM")
if [ -n "${MAVEN_REPO_LOCAL:-}" ]; then
    MAVEN+=("-Dmaven.repo.local=$MAVEN_REPO_LOCAL")
fi

for profile in "$@"; do
    target=.cache/jars/$profile
    stamp=$target/.fetched-from
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$DIGEST" ]; then
        echo "fetch-jars: $profile: $(ls "$target"/*.jar | wc -l) jars in $target"
        continue
    fi
    rm -rf "$target"
    mkdir -p "$target"
    start=$SECONDS
    "${MAVEN[@]}" -P "$profile" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$PWD/$target"
    echo "$DIGEST" > "$stamp"
    echo "fetch-jars: $profile: $(ls "$target"/*.jar | wc -l) jars in $target" \
         "($((SECONDS - start)) s)"
done
