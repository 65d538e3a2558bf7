#!/usr/bin/env bash
# The Debian packages the test suite needs besides Python's: headless Chromium and its
# WebDriver, for the dashboard's browser test (pytest -m browser), and haproxy, the load
# balancer in front of the chaos soak's two server processes (deploy/haproxy/haproxy.cfg,
# tests/soak/). No download at test time. Idempotent: does nothing when every command is
# already there. The Python side (selenium) comes with the project's dev extras; PostgreSQL's
# server binaries (initdb, pg_ctl), which the soak's private cluster uses, come with the
# PostgreSQL server the suite runs against.
set -euo pipefail

# command -> the package that provides it
declare -A PACKAGE_OF=(
    [chromium]=chromium
    [chromedriver]=chromium-driver
    [haproxy]=haproxy
)

missing=()
for command in "${!PACKAGE_OF[@]}"; do
    if ! command -v "$command" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$command" ]; then
        missing+=("${PACKAGE_OF[$command]}")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-system-packages: $(chromium --version 2>/dev/null | head -1), chromedriver," \
         "$(haproxy -v 2>/dev/null | head -1 | cut -d' ' -f1-3) present"
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
