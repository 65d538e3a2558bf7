#!/usr/bin/env bash
# pyiceberg's own integration tests for REST catalogs (tests/integration/test_rest_catalog.py,
# test_catalog.py, test_rest_scan_planning_integration.py), for
# tests/metaservice/catalog/test_pyiceberg_suite.py: the sdist of the pyiceberg the venv has (pip
# download), its tests/ and pyproject.toml (the suite's pytest configuration) under
# .cache/pyiceberg-suite/<version>/, and what the suite imports that the venv lacks (boto3, moto,
# pytest-lazy-fixtures; thrift, which test_catalog.py's import of pyiceberg's Hive catalog needs)
# in .cache/pyiceberg-suite/deps. Idempotent: does nothing when they are there.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
VERSION=$("$PYTHON" -c 'from importlib.metadata import version; print(version("pyiceberg"))')
TARGET=.cache/pyiceberg-suite
if [ -f "$TARGET/$VERSION/pyproject.toml" ] && [ -d "$TARGET/deps/moto" ] \
        && [ -d "$TARGET/deps/thrift" ]; then
    exit 0
fi
mkdir -p "$TARGET"
# The sdist through pip's own client (it builds the package's metadata, nothing is installed).
"$PYTHON" -m pip download -q --no-deps --no-binary :all: "pyiceberg==$VERSION" -d "$TARGET"
"$PYTHON" - "$VERSION" "$TARGET" <<'PY'
import sys, tarfile
version, target = sys.argv[1], sys.argv[2]
archive = tarfile.open(f"{target}/pyiceberg-{version}.tar.gz")
root = f"pyiceberg-{version}/"
members = [m for m in archive.getmembers()
           if m.name.startswith(root + "tests/") or m.name == root + "pyproject.toml"]
for member in members:
    member.name = f"{version}/" + member.name.removeprefix(root)
archive.extractall(target, members=members, filter="data")
PY
rm -rf "$TARGET/deps"
"$PYTHON" -m pip install -q --target "$TARGET/deps" boto3 moto pytest-lazy-fixtures thrift
# What the venv has already stays the venv's (its pytest, pydantic, ...): only the rest is added.
SITE=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for entry in "$TARGET"/deps/*; do
    if [ -e "$SITE/$(basename "$entry")" ]; then rm -rf "$entry"; fi
done
