#!/usr/bin/env bash
# The Debian packages the test suite needs besides Python's: PostgreSQL's server (the suite
# starts a private cluster of its own when no server answers at METASERVICE_TEST_POSTGRES_URL,
# and so do the soak and the benchmarks; pgbench comes with it), headless Chromium and its
# WebDriver, for the dashboard's browser test (pytest -m browser), haproxy, the load balancer
# in front of the chaos soak's two server processes (deploy/haproxy/haproxy.cfg, tests/soak/),
# Maven, which fetches the JVM dependencies (engines/pom.xml), and etcd and Patroni, the
# failover manager of the PostgreSQL the Patroni failover test and soak run on
# (deploy/patroni/, metaservice_soak/patroni.py). No download at test time.
# Idempotent: does nothing when every command is already there. The Python side (selenium)
# comes with the project's dev extras.
set -euo pipefail

# command -> the package that provides it
declare -A PACKAGE_OF=(
    [chromium]=chromium
    [chromedriver]=chromium-driver
    [haproxy]=haproxy
    [mvn]=maven
    [etcd]=etcd-server
    [patroni]=patroni
)

missing=()
for command in "${!PACKAGE_OF[@]}"; do
    if ! command -v "$command" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$command" ]; then
        missing+=("${PACKAGE_OF[$command]}")
    fi
done

# Debian keeps PostgreSQL's server programs off PATH, in /usr/lib/postgresql/<major>/bin
postgres_bin() {
    command -v initdb 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -1
}
if [ -z "$(postgres_bin)" ]; then
    missing+=(postgresql)
fi

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-system-packages: $(chromium --version 2>/dev/null | head -1), chromedriver," \
         "$(haproxy -v 2>/dev/null | head -1 | cut -d' ' -f1-3), PostgreSQL's" \
         "$("$(postgres_bin)" --version | cut -d' ' -f3), Maven," \
         "$(etcd --version 2>/dev/null | head -1), $(patroni --version 2>/dev/null) present"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
chromium --version
chromedriver --version
haproxy -v | head -1
"$(postgres_bin)" --version
mvn --version | head -1
etcd --version | head -1
patroni --version
