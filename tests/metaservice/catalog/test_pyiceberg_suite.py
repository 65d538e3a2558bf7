"""pyiceberg's own integration tests for REST catalogs, from the sdist of the pyiceberg this venv
has (put in place by engines/pyiceberg-suite/install.sh), against the catalog: its scan planning
suite (``tests/integration/test_rest_scan_planning_integration.py``) and its catalog suite
(``test_rest_catalog.py`` and ``test_catalog.py``). Each runs by pytest in a child process as
pyiceberg's CI runs it, with the suite's own configuration (its pyproject.toml), fixtures and
hooks (``PYICEBERG_TEST_CATALOG`` and pyiceberg's ``PYICEBERG_CATALOG__<NAME>__*`` variables),
its assertions unedited.

The suite's fixtures name the catalog at ``http://localhost:8181``, a catalog served at the root
(``/v1/...``); the server's catalog lives under ``/iceberg``. So the test serves the catalog on
that port through a wrapper that only puts ``/iceberg`` before each path, as a reverse proxy
in front of the server would; one test holds the port at a time. Both suites run in one pytest
process (its imports take about 5 s), on each backend.

Every test a suite runs passes but those listed in its ``not_passed``, each argued in
docs/conformance.md, and at least its ``passes`` pass: a suite test that newly fails fails this
test. A test whose premise the catalog cannot hold (a ``.`` between a namespace's levels, where a
level may hold a dot) is deselected by node id (``deselected``), with its reason, also argued in
docs/conformance.md; so are, by ``-k``,
``test_catalog.py``'s tests of its other catalogs (pyiceberg's in-process ones, which never
reach the server, and Hive, whose metastore is not here).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ServerThread, missing

# A pytest child process of about 17 s; on both backends.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
PORT = 8181  # the suite's fixtures' catalog URI
CATALOG = "metaservice"  # the name PYICEBERG_TEST_CATALOG gives the suite's rest_test_catalog


@dataclass(frozen=True)
class Suite:
    """Some of pyiceberg's integration test files, and what is known of them here."""

    files: tuple[str, ...]
    passes: int  # at least this many pass
    # test -> why it does not pass here (at length: docs/conformance.md)
    not_passed: dict[str, str] = field(default_factory=dict)
    # node id -> why it is not run here (at length: docs/conformance.md)
    deselected: dict[str, str] = field(default_factory=dict)
    # tests the suite skips itself (its own capability checks)
    skipped: frozenset[str] = frozenset()
    # a -k expression: the tests of pyiceberg's other catalogs, which never reach this server
    keyword: str | None = None
    # the suite's own hooks (pyiceberg's catalog configuration through the environment)
    environment: dict[str, str] = field(default_factory=dict)


_CATALOG_TESTS = "tests/integration/test_catalog.py::"

SUITES = {
    "scan_planning": Suite(
        files=("tests/integration/test_rest_scan_planning_integration.py",),
        passes=6,
        not_passed={
            # Its ``spark`` fixture is a Spark Connect server at localhost:15002 (pyiceberg's
            # docker compose); the same case, with Iceberg's Spark runtime writing the position
            # deletes, is test_scan_planning.py's
            # test_position_deletes_written_by_spark_are_planned_with_their_data_files.
            "test_rest_scan_with_deletes": "needs a Spark Connect server",
        }),
    "catalog": Suite(
        files=("tests/integration/test_rest_catalog.py", "tests/integration/test_catalog.py"),
        passes=85,
        # Skipped by the suite: its does_support_slash_in_identifier is False for a REST
        # catalog whose configuration does not say otherwise (and the catalog refuses slashes).
        skipped=frozenset(f"{test}[{catalog}]" for test in ("test_namespace_with_slash",
                                                            "test_table_name_with_slash")
                          for catalog in ("rest_catalog", "rest_test_catalog")),
        keyword="not memory_catalog and not sqlite_catalog and not hive_catalog",
        environment={"PYICEBERG_TEST_CATALOG": CATALOG,
                     f"PYICEBERG_CATALOG__{CATALOG.upper()}__TYPE": "rest",
                     f"PYICEBERG_CATALOG__{CATALOG.upper()}__URI": f"http://localhost:{PORT}"},
        deselected={
            f"{_CATALOG_TESTS}test_rest_custom_namespace_separator": (
                "it expects `namespace-separator` `.` from /v1/config (its suite's server is "
                "configured so): a part of a name may hold a dot here (`new.db`, which the "
                "suite's own test_namespace_with_dot creates through the same catalog), so a "
                "`.` between levels would read `new.db` as two levels; the catalog says `%1F`"),
        }),
}


def suite_directory() -> Path:
    from importlib.metadata import version

    directory = ROOT / ".cache" / "pyiceberg-suite" / version("pyiceberg")
    if not (directory / SUITES["scan_planning"].files[0]).is_file() or not (
            directory.parent / "deps" / "thrift").is_dir():
        missing(f"pyiceberg's test suite is not in {directory}, or its packages are not beside "
                "it (bash engines/pyiceberg-suite/install.sh)",
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


def outcomes(report: Path) -> dict[str, dict[str, str]]:
    """``{test file: {test name: passed | failed | error | skipped}}`` from a JUnit XML
    report."""
    found: dict[str, dict[str, str]] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        test_file = case.attrib["classname"].replace(".", "/") + ".py"
        found.setdefault(test_file, {})[case.attrib["name"]] = next(
            (k for k in ("error", "failure", "skipped") if k in kinds), "passed")
    return found


@contextmanager
def the_suites_port() -> Iterator[None]:
    """Port 8181, held by one test at a time on this machine (a file lock): whatever the
    distribution of the tests over pytest-xdist's workers, and across runs."""
    with (Path(tempfile.gettempdir()) / f"metaservice-pyiceberg-suite-{PORT}.lock").open(
            "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def test_pyiceberg_suites(app: Any, tmp_path: Path) -> None:
    """Every suite in one pytest process (its start, about 5 s of imports, is paid once)."""
    directory = suite_directory()
    server = ServerThread(AtTheRoot(app))
    server.port = PORT
    server.server.config.port = PORT
    report = tmp_path / "junit.xml"
    selection = [*(f for suite in SUITES.values() for f in suite.files), "-m", "integration",
                 "-k", " and ".join(f"({suite.keyword})" for suite in SUITES.values()
                                    if suite.keyword)]
    for suite in SUITES.values():
        for node in suite.deselected:
            selection += ["--deselect", node]
    environment = {k: v for suite in SUITES.values() for k, v in suite.environment.items()}
    with the_suites_port(), server:
        started = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "pytest", *selection, "-p", "no:cacheprovider", "-q",
             f"--junitxml={report}"],
            cwd=directory, capture_output=True, text=True, timeout=600,
            env={**os.environ, "PYTHONPATH": str(directory.parent / "deps"), **environment})
        seconds = time.monotonic() - started
    assert report.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    found = outcomes(report)
    conformance = (ROOT / "docs" / "conformance.md").read_text()
    for name, suite in SUITES.items():
        ran = {test: kind for f in suite.files for test, kind in found.get(f, {}).items()}
        not_passed = {test: kind for test, kind in ran.items()
                      if kind != "passed" and not (kind == "skipped" and test in suite.skipped)}
        assert set(not_passed) == set(suite.not_passed), (name, not_passed, run.stdout[-5000:])
        passed = sum(kind == "passed" for kind in ran.values())
        assert passed >= suite.passes, (name, passed, run.stdout[-3000:])
        assert not {node.split("::")[-1] for node in suite.deselected} & set(ran)
        print(f"pyiceberg's {name} suite: {passed} passed, {len(ran) - passed} not passed, "
              f"{len(suite.deselected)} deselected")
        for test in [*suite.not_passed, *(node.split("::")[-1] for node in suite.deselected)]:
            assert f"`{test}`" in conformance, f"docs/conformance.md does not argue {test}"
    print(f"pyiceberg's suites ran in {seconds:.1f} s")  # about 17 s on 2 cores
