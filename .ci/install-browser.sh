#!/usr/bin/env bash
# Headless Chromium and its WebDriver, for the dashboard's browser test (pytest -m browser).
# Debian's packages: no browser download at test time. Idempotent: does nothing when both are
# already installed. The Python side (selenium) comes with the project's dev extras.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    echo "install-browser: $(chromium --version 2>/dev/null | head -1), chromedriver present"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver
chromium --version
chromedriver --version
