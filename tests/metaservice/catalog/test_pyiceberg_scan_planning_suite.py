"""pyiceberg's own scan planning suite (``tests/integration/test_rest_scan_planning_integration.py``
of the sdist of the pyiceberg this venv has, put in place by engines/pyiceberg-suite/install.sh)
against the catalog, run by pytest in a child process as pyiceberg's CI runs it, with the suite's
own configuration (its pyproject.toml) and fixtures, unedited.

The suite's fixtures name the catalog at ``http://localhost:8181``, a catalog served at the root
(``/v1/...``); the server's catalog lives under ``/iceberg``. So the test serves the catalog on
that port through a wrapper that only puts ``/iceberg`` before each path, as a reverse proxy
in front of the server would.

Every suite test passes but those listed in ``EXPECTED_NOT_PASSED``, each argued in
docs/conformance.md: a suite test that newly fails fails this test, and so does one of those
that newly passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ServerThread, missing

# A pytest child process of a few seconds; on both backends (the plans live in the database).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
SUITE = "tests/integration/test_rest_scan_planning_integration.py"
PORT = 8181  # the suite's fixtures' catalog URI

# suite test -> why it does not pass here (at length: docs/conformance.md)
EXPECTED_NOT_PASSED = {
    # Its ``spark`` fixture is a Spark Connect server at localhost:15002 (pyiceberg's docker
    # compose); the same case, with Iceberg's Spark runtime writing the position deletes, is
    # test_scan_planning.py's
    # test_position_deletes_written_by_spark_are_planned_with_their_data_files.
    "test_rest_scan_with_deletes": "needs a Spark Connect server",
}


def suite_directory() -> Path:
    from importlib.metadata import version

    directory = ROOT / ".cache" / "pyiceberg-suite" / version("pyiceberg")
    if not (directory / SUITE).is_file() or not (directory.parent / "deps").is_dir():
        missing(f"pyiceberg's test suite is not in {directory} "
                "(bash engines/pyiceberg-suite/install.sh)",
                required_by="METASERVICE_REQUIRE_PYICEBERG_SUITE")
    return directory


class AtTheRoot:
    """The app with its catalog at the root: ``/v1/...`` is the app's ``/iceberg/v1/...``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            scope = {**scope, "path": "/iceberg" + scope["path"],
                     "raw_path": b"/iceberg" + scope.get("raw_path", b"")}
        await self.app(scope, receive, send)


def outcomes(report: Path) -> dict[str, str]:
    """``{test name: passed | failed | error | skipped}`` from a JUnit XML report."""
    found = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        found[case.attrib["name"]] = next(
            (k for k in ("error", "failure", "skipped") if k in kinds), "passed")
    return found


def test_pyiceberg_scan_planning_suite(app: Any, tmp_path: Path) -> None:
    directory = suite_directory()
    server = ServerThread(AtTheRoot(app))
    server.port = PORT
    server.server.config.port = PORT
    report = tmp_path / "junit.xml"
    with server:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", SUITE, "-m", "integration", "-p", "no:cacheprovider",
             "-q", f"--junitxml={report}"],
            cwd=directory, capture_output=True, text=True, timeout=600,
            env={**os.environ, "PYTHONPATH": str(directory.parent / "deps")})
    assert report.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    found = outcomes(report)
    not_passed = {name: kind for name, kind in found.items() if kind != "passed"}
    assert set(not_passed) == set(EXPECTED_NOT_PASSED), run.stdout[-5000:]
    assert len(found) - len(not_passed) == 6, found
    conformance = (ROOT / "docs" / "conformance.md").read_text()
    for name in EXPECTED_NOT_PASSED:
        assert f"`{name}`" in conformance, f"docs/conformance.md does not argue {name}"
