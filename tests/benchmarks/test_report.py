"""How a result is judged and printed: every ratio says how many times better the figure is
than its baseline, and a compared figure's goal is a floor on that same ratio."""

from __future__ import annotations

import pytest

from benchmarks._report import Result, markdown_table, text_table


def latency(value: float) -> Result:
    return Result.compare("commit p50", value, "ms", baseline="SqlCatalog append",
                          baseline_value=10.0, higher_is_better=False, at_least=1 / 1.3,
                          goal="at most 1.3× SqlCatalog's latency")


def test_a_slower_latency_is_a_ratio_below_one() -> None:
    assert latency(12.5).ratio == pytest.approx(0.8)
    assert latency(8.0).ratio == pytest.approx(1.25)


def test_a_lower_throughput_is_a_ratio_below_one() -> None:
    result = Result.compare("append", 90.0, "rows/s", baseline="plain write",
                            baseline_value=100.0, higher_is_better=True, at_least=0.9,
                            goal="at least 90 % of the plain write's rows/s")
    assert result.ratio == pytest.approx(0.9) and result.met is True


def test_the_goal_is_met_when_the_ratio_reaches_its_floor() -> None:
    assert latency(13.0).met is True    # 1.3× the baseline's latency: ratio 0.77
    assert latency(13.5).met is False   # 1.35×: ratio 0.74


def test_the_goal_cell_gives_the_floor_then_the_goal_in_words() -> None:
    table = markdown_table([latency(12.0)])
    assert "| 0.83× | ≥ 0.77× (at most 1.3× SqlCatalog's latency) | met |" in table


def test_the_header_states_the_ratios_direction() -> None:
    for table in (markdown_table([latency(12.0)]), text_table([latency(12.0)])):
        assert "vs baseline (> 1× = better)" in table.splitlines()[0]


def test_a_goal_on_the_value_is_printed_as_written() -> None:
    result = Result.absolute("versions p99", 9.0, "ms", goal="p99 ≤ 10 ms",
                             met_if=lambda v: v <= 10)
    assert "| — | p99 ≤ 10 ms | met |" in markdown_table([result])
