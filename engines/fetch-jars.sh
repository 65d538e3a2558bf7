#!/usr/bin/env bash
# Fetches the jars of the routes named (profiles of engines/pom.xml, which declares every JVM
# dependency of the project, pinned) with Maven into its local repository (~/.m2, or
# MAVEN_REPO_LOCAL), and links each profile's jars into .cache/jars/<profile>/, where that
# route's Spark or JUnit finds them: hard links to the local repository's files (copies where it is
# on another filesystem), so a checkout adds no second copy of the 1.6 GB. Nothing is built. Idempotent: a profile whose jars were
# linked from the same engines/pom.xml is left alone without starting Maven. Maven 3.8 does not
# lock its local repository, and two Maven processes writing one at once can leave a broken
# artifact in it: when a profile needs Maven, the script runs again holding a lock in that
# repository (engines/locked.sh), so fetches started together (engines/install.sh runs its
# installers at once; other checkouts share ~/.m2) take turns.
#
#   bash engines/fetch-jars.sh spark35 [spark41 plugin-kafka kafka rck]
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$#" -eq 0 ]; then
    echo "usage: bash engines/fetch-jars.sh PROFILE... (profiles of engines/pom.xml:" \
         "spark35 spark41 plugin-kafka kafka rck)" >&2
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

fetched() {
    [ -f ".cache/jars/$1/.fetched-from" ] && [ "$(cat ".cache/jars/$1/.fetched-from")" = "$DIGEST" ]
}

if [ -z "${FETCH_JARS_LOCKED:-}" ]; then
    for profile in "$@"; do
        if ! fetched "$profile"; then
            # The default local repository, unless MAVEN_REPO_LOCAL names another (one lock per
            # user's ~/.m2 even when a settings.xml moves its repository: only coarser).
            export FETCH_JARS_LOCKED=1
            exec bash engines/locked.sh "${MAVEN_REPO_LOCAL:-$HOME/.m2/repository}/.fetch-jars.lock" \
                bash engines/fetch-jars.sh "$@"
        fi
    done
fi

for profile in "$@"; do
    target=.cache/jars/$profile
    stamp=$target/.fetched-from
    if fetched "$profile"; then
        echo "fetch-jars: $profile: $(ls "$target"/*.jar | wc -l) jars in $target"
        continue
    fi
    rm -rf "$target"
    mkdir -p "$target"
    start=$SECONDS
    "${MAVEN[@]}" -P "$profile" dependency:build-classpath \
        -DincludeScope=runtime -Dmdep.outputFile="$PWD/$target/.classpath"
    tr ":" "\n" < "$target/.classpath" | while read -r jar || [ -n "$jar" ]; do
        ln -f "$jar" "$target/" 2>/dev/null || cp "$jar" "$target/"
    done
    rm "$target/.classpath"
    echo "$DIGEST" > "$stamp"
    echo "fetch-jars: $profile: $(ls "$target"/*.jar | wc -l) jars in $target" \
         "($((SECONDS - start)) s)"
done
