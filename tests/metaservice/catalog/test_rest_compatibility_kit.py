"""Apache Iceberg's REST Compatibility Kit against a live server: ``RESTCompatibilityKitSuite``
(its ``CatalogTests`` and ``ViewCatalogTests``), from the ``tests`` and ``test-fixtures`` jars
Apache Iceberg publishes (engines/pom.xml, profile ``rck``), run by JUnit's console launcher
against ``metaservice serve`` on PostgreSQL, as Iceberg's Java ``RESTCatalog`` sees it.

Every test passes but those listed in ``EXCLUDED``, each argued in docs/conformance.md: a kit
test that newly fails fails this test, and so does an exclusion the docs do not argue. The
kit's switches say what the server does: it requires a namespace to be created before its
tables (``rck.requires-namespace-create``) and takes names with a dot
(``rck.supports-names-with-dot``). The kit has no switch for nested namespaces (its
``supportsNestedNamespaces()`` is false and read from nowhere): its two nested-namespace tests
run from ``engines/rck/RESTCompatibilityKitNestedNamespacesTests.java``, the kit's catalog
tests with that answer true and the namespace those two use (``parent``) purged around each,
compiled here against the kit's jars. The kit writes tables where it likes (its JVM's
temporary directory, and ``file:/tmp/ns``, ``file:/tmp/newdb`` that some of its tests name):
the server allows those locations (``METASERVICE_ALLOWED_LOCATIONS``), as an operator would
for such a client.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.conftest import missing
from tests.metaservice.test_durability import ServerProcess

# A server process and a JVM, about 40 s: on PostgreSQL, the production store (the kit tries the
# catalog's answers; what each backend stores is tried by the catalog's own tests on both).
pytestmark = [pytest.mark.slow, pytest.mark.backends("postgresql")]

ROOT = Path(__file__).resolve().parents[3]
JARS = ROOT / ".cache" / "jars" / "rck"
LAUNCHER = "junit-platform-console-standalone"
SUITE = "org.apache.iceberg.rest.RESTCompatibilityKitSuite"
NESTED = "org.apache.iceberg.rest.RESTCompatibilityKitNestedNamespacesTests"
NESTED_SOURCE = ROOT / "engines" / "rck" / "RESTCompatibilityKitNestedNamespacesTests.java"
# the kit's tests that run only where the catalog supports nested namespaces
NESTED_TESTS = ("testListNestedNamespaces", "testDropNamespaceWithNestedNamespace")

# kit test -> why it fails here (the reasons at length: docs/conformance.md)
EXCLUDED = {
    # A table with history is not replaced (MetaService's rule: its head moves only forward;
    # docs/contract.md#commits-through-the-catalog): REPLACE TABLE keeps the table's rows
    # reachable only by rewriting them.
    "testReplaceTableKeepsSnapshotLog()": "replace of a table with history",
    "testConcurrentReplaceTransactions()": "replace of a table with history",
    "testConcurrentReplaceTransactionSchema()": "replace of a table with history",
    "testConcurrentReplaceTransactionSchema2()": "replace of a table with history",
    "testConcurrentReplaceTransactionSchemaConflict()": "replace of a table with history",
    "testConcurrentReplaceTransactionPartitionSpec()": "replace of a table with history",
    "testConcurrentReplaceTransactionPartitionSpec2()": "replace of a table with history",
    "testConcurrentReplaceTransactionPartitionSpecConflict()": "replace of a table with history",
    "testConcurrentReplaceTransactionSortOrder()": "replace of a table with history",
    "testConcurrentReplaceTransactionSortOrderConflict()": "replace of a table with history",
    # Format version 3: pyiceberg, which writes the catalog's metadata files, writes 1 and 2.
    "createTableTransaction(int)": "format version 3",
    "testCreateTableWithDefaultColumnValue()": "format version 3",
    # A metadata file is immutable and served from memory once read; one deleted under the
    # catalog is still answered until the server restarts.
    "testLoadTableWithMissingMetadataFile(Path)": "metadata files served from memory",
    # A view the server refuses is a 400 of type BadRequestException; the kit expects the
    # Java client's own IllegalArgumentException.
    "createViewErrorCases()": "a bad view is BadRequestException",
}


def _fetch_jars() -> list[Path]:
    if shutil.which("java") is None:
        missing("java is missing (Debian's openjdk-17-jre-headless)",
                required_by="METASERVICE_REQUIRE_SPARK_JVM")
    done = subprocess.run(["bash", "engines/fetch-jars.sh", "rck"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        missing(f"the kit's jars could not be fetched:\n{done.stderr[-2000:]}",
                required_by="METASERVICE_REQUIRE_SPARK_JVM")
    return sorted(JARS.glob("*.jar"))


def _compile_nested(jars: list[Path], classes: Path) -> None:
    """The kit's catalog tests with ``supportsNestedNamespaces()`` true (the kit reads no
    property for it), compiled against the kit's jars into ``classes``."""
    if shutil.which("javac") is None:
        missing("javac is missing (Debian's openjdk-17-jdk-headless)",
                required_by="METASERVICE_REQUIRE_SPARK_JVM")
    subprocess.run(["javac", "-d", str(classes), "-cp", ":".join(str(j) for j in jars),
                    str(NESTED_SOURCE)], check=True, capture_output=True, timeout=300)


def _outcomes(reports: Path) -> dict[str, str]:
    """Each kit test's outcome (passed, failed, skipped), by method, from JUnit's XML report;
    a parameterised test fails when any of its cases does."""
    outcomes: dict[str, str] = {}
    for report in reports.glob("TEST-*.xml"):
        for case in ElementTree.parse(report).getroot().iter("testcase"):
            if "RESTCompatibilityKit" not in case.get("classname", ""):
                continue
            name = re.sub(r"\[\d+\]$", "", case.get("name", ""))  # a parameterised case
            if case.find("failure") is not None or case.find("error") is not None:
                outcomes[name] = "failed"
            elif case.find("skipped") is not None:
                outcomes.setdefault(name, "skipped")
            else:
                outcomes.setdefault(name, "passed")
    return outcomes


def test_the_kit_passes_but_for_the_argued_exclusions(
        server_database_url: str, tmp_path: Path, backend: str) -> None:
    jars = _fetch_jars()
    launcher = next((j for j in jars if j.name.startswith(LAUNCHER)), None)
    assert launcher is not None, f"no {LAUNCHER} jar among {JARS}"
    java_tmp = tmp_path / "java-tmp"
    java_tmp.mkdir()
    classes = tmp_path / "classes"
    _compile_nested(jars, classes)
    server = ServerProcess(server_database_url, tmp_path / "server.log", env={
        "METASERVICE_WAREHOUSE": str(tmp_path / "warehouse"),
        "METASERVICE_ALLOWED_LOCATIONS": f"{tmp_path},/tmp/ns,/tmp/newdb"})
    server.start()
    try:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        environment.update(CATALOG_URI=f"{server.url}/iceberg", CATALOG_WAREHOUSE="lake")
        reports = tmp_path / "reports"

        def run_the_kit(selection: list[str], to: Path) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["java", f"-Djava.io.tmpdir={java_tmp}", "-Drck.local=false",
                 "-Drck.requires-namespace-create=true", "-Drck.supports-names-with-dot=true",
                 "-jar", str(launcher), "execute",
                 "-cp", ":".join([str(classes), *(str(j) for j in jars if j != launcher)]),
                 *selection, "--details=none", "--disable-banner", f"--reports-dir={to}"],
                env=environment, capture_output=True, text=True, timeout=600)

        # The nested-namespace tests first, in a JVM of their own: each class of the kit
        # begins by checking the catalog holds none of its test namespaces, which the suite's
        # last tests leave behind (the kit purges them before each test, not after).
        nested = run_the_kit([a for test in NESTED_TESTS
                              for a in ("--select-method", f"{NESTED}#{test}")],
                             reports / "nested")
        done = run_the_kit(["--select-class", SUITE], reports / "suite")
    finally:
        server.kill()
    outcomes = _outcomes(reports / "suite")
    assert outcomes, f"no kit test ran:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    ran_nested = _outcomes(reports / "nested")
    assert set(ran_nested) == {f"{test}()" for test in NESTED_TESTS}, (
        ran_nested, nested.stdout[-3000:], nested.stderr[-3000:])
    for test, outcome in ran_nested.items():
        if outcome != "skipped":
            outcomes[test] = outcome
    failed = sorted(name for name, outcome in outcomes.items() if outcome == "failed")
    passed = sum(outcome == "passed" for outcome in outcomes.values())
    skipped = sorted(name for name, outcome in outcomes.items() if outcome == "skipped")
    print(f"\nREST compatibility kit on {backend}: {passed} passed, {len(failed)} failed "
          f"(excluded), {len(skipped)} not run by the kit: {skipped}")
    unexpected = [name for name in failed if name not in EXCLUDED]
    assert not unexpected, f"kit tests failing beyond the exclusions: {unexpected}\n" + (
        done.stdout[-6000:])
    # the names the catalog serves are tried: nested namespaces and names with a dot
    for test in (*NESTED_TESTS, "testNamespaceWithDot", "testTableNameWithDot"):
        assert outcomes.get(f"{test}()") == "passed", (test, outcomes.get(f"{test}()"),
                                                       nested.stdout[-3000:])
    assert passed >= 129, done.stdout[-3000:]


def test_every_exclusion_is_argued_in_the_conformance_page() -> None:
    page = (ROOT / "docs" / "conformance.md").read_text()
    for name in EXCLUDED:
        assert f"`{name.split('(')[0]}`" in page, f"docs/conformance.md does not argue {name}"
