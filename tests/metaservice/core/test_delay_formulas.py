"""The delay formulas (docs/contract.md#delay) on a constructed pipeline, answers computed by hand.

    A (root, latest 1000) ──J1──▶ C (800) ──┐
      │                                     ├──J3──▶ E (700)
      └─────┬──J2──▶ D (850) ───────────────┘
    B (root, latest 900) ┘

now = 1500.
"""

from __future__ import annotations

from metaservice.core import delay_formulas as formulas
from metaservice.core.delay_formulas import JobDelayInput, Percentiles

NOW = 1500
LATEST: dict[str, int | None] = {"A": 1000, "B": 900, "C": 800, "D": 850, "E": 700}
J1 = JobDelayInput("J1", frozenset({"A"}), frozenset({"C"}))
J2 = JobDelayInput("J2", frozenset({"A", "B"}), frozenset({"D"}))
J3 = JobDelayInput("J3", frozenset({"C", "D"}), frozenset({"E"}))
WRITER_OF = {"C": J1, "D": J2, "E": J3}


def _local_lag(job: JobDelayInput, latest: dict[str, int | None]) -> int | None:
    return formulas.job_local_lag((latest[s] for s in job.sources), (latest[k] for k in job.sinks))


def test_table_lag_is_now_minus_latest() -> None:
    assert formulas.table_lag(NOW, 700) == 800
    assert formulas.table_lag(NOW, None) is None


def test_job_local_lag_is_min_sources_minus_min_sinks() -> None:
    assert _local_lag(J1, LATEST) == 1000 - 800
    assert _local_lag(J2, LATEST) == 900 - 850      # B holds J2 back
    assert _local_lag(J3, LATEST) == 800 - 700      # C holds J3 back


def test_job_local_lag_is_undefined_without_data_on_either_side() -> None:
    assert formulas.job_local_lag([1000, None], [800]) is None
    assert formulas.job_local_lag([1000], [None]) is None
    assert formulas.job_local_lag([], [800]) is None


def test_hop_and_end_to_end_latency() -> None:
    assert formulas.hop_latency(sources_ready_at=1_000, finished_at=1_250) == 250
    assert formulas.hop_latency(None, 1_250) is None
    assert formulas.end_to_end_latency(barrier=1_000, committed_at=1_400) == 400


def test_lag_decomposes_along_the_critical_path_and_adds_up() -> None:
    d = formulas.decompose_lag("E", NOW, LATEST, WRITER_OF)
    assert d.lag_ms == 800
    assert [(h.job, h.source, h.sink, h.lag_ms) for h in d.hops] == [
        ("J3", "C", "E", 100),   # 800 − 700: C, not D, holds J3 back
        ("J1", "A", "C", 200),   # 1000 − 800
    ]
    assert (d.root, d.root_latest, d.root_lag_ms) == ("A", 1000, 500)
    assert d.root_lag_ms + sum(h.lag_ms for h in d.hops) == d.lag_ms  # type: ignore[operator]


def test_a_root_table_is_its_own_path() -> None:
    d = formulas.decompose_lag("B", NOW, LATEST, WRITER_OF)
    assert d.hops == [] and d.root == "B" and d.root_lag_ms == d.lag_ms == 600


def test_decomposition_stops_at_a_source_without_data() -> None:
    latest = {**LATEST, "B": None}
    d = formulas.decompose_lag("D", NOW, latest, WRITER_OF)
    assert [(h.job, h.source, h.lag_ms) for h in d.hops] == [("J2", "B", None)]
    assert d.root is None


def test_bottleneck_is_the_upstream_job_with_the_greatest_local_lag() -> None:
    local = {j.job: _local_lag(j, LATEST) for j in (J1, J2, J3)}
    assert local == {"J1": 200, "J2": 50, "J3": 100}
    result = formulas.bottlenecks_by_table(["A", "B", "C", "D", "E"], WRITER_OF, local, {})
    assert result == {"A": None, "B": None, "C": "J1", "D": "J2", "E": "J1"}
    assert formulas.pick_bottleneck((j, local[j], None) for j in ("J2", "J3")) == "J3"


def test_equal_local_lags_are_decided_by_the_recent_hop_latency_then_the_name() -> None:
    latest = {**LATEST, "E": 600}                     # J3's local lag becomes 200, like J1's
    local = {j.job: _local_lag(j, latest) for j in (J1, J2, J3)}
    assert local["J1"] == local["J3"] == 200
    hops = {"J1": 30, "J2": 900, "J3": 50}
    assert formulas.bottlenecks_by_table(["E"], WRITER_OF, local, hops) == {"E": "J3"}
    assert formulas.pick_bottleneck([("J3", 200, 30), ("J1", 200, 30)]) == "J1"
    assert formulas.pick_bottleneck([("J1", None, 999), ("J2", 0, None)]) == "J2"


def test_a_job_that_produced_nothing_ranks_above_every_known_lag() -> None:
    """E's writer J3 has input but has completed nothing: its unknown lag is the worst."""
    latest = {**LATEST, "E": None}
    local = {j.job: _local_lag(j, latest) for j in (J1, J2, J3)}
    assert local == {"J1": 200, "J2": 50, "J3": None}
    stalled = {j.job for j in (J1, J2, J3) if formulas.produced_nothing(
        (latest[s] for s in j.sources), (latest[k] for k in j.sinks))}
    assert stalled == {"J3"}
    assert formulas.bottlenecks_by_table(["C", "E"], WRITER_OF, local, {}, stalled) == {
        "C": "J1", "E": "J3"}
    assert formulas.pick_bottleneck([("J1", 200, 30), ("J3", None, None)], stalled) == "J3"


def test_a_job_without_input_is_not_stalled() -> None:
    """A source with no barrier: the job waits for another, which is the one to name."""
    assert formulas.produced_nothing([1000, None], [None]) is False
    assert formulas.produced_nothing([1000], [None]) is True
    assert formulas.produced_nothing([1000], [800, None]) is True
    assert formulas.produced_nothing([1000], [800]) is False
    assert formulas.produced_nothing([], [None]) is True   # ingestion that has produced nothing
    assert formulas.produced_nothing([1000], []) is False


def test_bottlenecks_of_a_deep_chain_need_no_recursion() -> None:
    writer_of = {f"t{i}": JobDelayInput(f"j{i}", frozenset({f"t{i - 1}"}), frozenset({f"t{i}"}))
                 for i in range(1, 5001)}
    local = {f"j{i}": (7 if i == 1234 else 1) for i in range(1, 5001)}
    result = formulas.bottlenecks_by_table([f"t{i}" for i in range(5001)], writer_of, local, {})
    assert result["t1233"] == "j1" and result["t1234"] == "j1234" and result["t5000"] == "j1234"


def test_nearest_rank_percentiles() -> None:
    tens = [100, 10, 90, 20, 80, 30, 70, 40, 60, 50]
    assert Percentiles.of(tens) == Percentiles(count=10, p50=50, p95=100, p99=100, max=100)
    hundred = list(range(1, 101))
    assert (formulas.percentile(hundred, 50), formulas.percentile(hundred, 95),
            formulas.percentile(hundred, 99)) == (50, 95, 99)
    assert Percentiles.of([]) == Percentiles(0, None, None, None, None)
