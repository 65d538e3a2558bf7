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
