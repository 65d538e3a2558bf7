"""The chaos soak, short and seeded, on PostgreSQL: the whole pipeline (ingestion, Spark jobs on
a standalone cluster, readers of three engines and the head reader), every kind of fault at
least once, then the final check. Fails on any invariant violation, lost or doubled row,
unexplained 5xx or failed check (``metaservice_soak.report``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from metaservice_soak.faults import KINDS
from metaservice_soak.harness import Soak, SoakConfig
from metaservice_soak.postgres import ClusterError, server_binary
from metaservice_soak.report import build, render
from tests.conftest import missing, one_spark_cluster_at_a_time
from tests.soak.conftest import require_haproxy

pytestmark = pytest.mark.slow  # about four minutes: PostgreSQL, servers, Spark, every fault

MINUTES = 1.0
SEED = 25


def test_a_short_soak_on_postgresql_loses_nothing_and_breaks_nothing(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if request.config.getoption("--backend") == "sqlite":
        pytest.skip("PostgreSQL is not in play (--backend sqlite)")
    require_haproxy()
    try:
        server_binary("initdb")
    except ClusterError as exc:
        missing(str(exc), required_by="METASERVICE_REQUIRE_POSTGRES")

    with one_spark_cluster_at_a_time():  # its cluster has the cores to itself
        outcome = Soak(SoakConfig(minutes=MINUTES, seed=SEED, backend="postgresql",
                                  state=tmp_path / "state", drain_timeout=240,
                                  stop_timeout=90)).run()
    report = build(outcome)
    text = render(report)
    print(text)
    assert report.passed, f"{report.problems}\n{text}\nstate: {outcome.state}"
    assert set(report.faults_by_kind) == set(KINDS), text
    assert set(report.reads_by_engine) >= {"duckdb", "pyiceberg", "spark"}, text
    assert report.head_breaks > 0, "the head reader never saw the invariant broken:\n" + text
    assert report.rows_ingested > 0 and report.rows_lost == 0 and report.rows_doubled == 0
