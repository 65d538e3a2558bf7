"""The Spark benchmark of the views at a tiny size: the pipeline's join answers the same through
the head and the strong view, the appends are recorded by MetaService one barrier each, and the
figures are judged against their goals. No timing is asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import spark_views
from tests.engines.spark35 import rig


@pytest.mark.spark_jvm
def test_the_benchmark_at_a_tiny_size(tmp_path: Path) -> None:
    for path in (rig.PYTHON, *rig.JARS):
        if not path.exists():
            rig.unavailable(f"{path} is missing")
    m = spark_views.measure("sqlite", join_rows=500, join_repeats=2, append_rows=300,
                            append_repeats=1, log=tmp_path / "driver.log")
    # Every join answered the expected count and sum (measure_join checks each answer).
    assert {side: len(s) for side, s in m.join_s.items()} == {"head": 2, "session": 2}
    assert set(m.first_s) == {"head", "session"}
    assert {side: len(s) for side, s in m.append_s.items()} == {"catalog": 1, "hadoop": 1}
    assert m.barriers_checked == 2  # the warm-up append and the timed one
    assert all(cpu > 0 for side in m.join_spark_cpu_s.values() for cpu in side)
    join, append = spark_views.results(m)
    assert (join.at_least, append.at_least) == (0.95, 0.9)
    assert all(isinstance(r.met, bool) and r.ratio is not None for r in (join, append))


def test_a_missing_rig_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(rig, "PYTHON", tmp_path / "no-venv" / "bin" / "python")
    with pytest.raises(RuntimeError, match="bash engines/spark35/install.sh"):
        spark_views.spark_driver(tmp_path / "driver.log")


def test_the_goals_are_judged_on_the_ratios() -> None:
    m = spark_views.Measured("sqlite", join_rows=1000, append_rows=1000,
                             first_s={"head": 2.0, "session": 2.5})
    m.join_s = {"head": [1.0, 1.0, 1.2], "session": [1.0, 1.04, 1.1]}
    m.join_cpu_ms = {"head": [10.0], "session": [12.0]}
    m.append_s = {"catalog": [2.2, 2.1, 2.3], "hadoop": [2.0] * 3}
    m.append_cpu_ms = [20.0]
    m.join_spark_cpu_s = {"head": [2.0], "session": [2.0]}
    m.append_spark_cpu_s = {"catalog": [3.0], "hadoop": [3.0]}
    join, append = spark_views.results(m)
    assert join.met is True and join.ratio == pytest.approx(1 / 1.04)       # p50s 1.04 vs 1.0
    assert append.met is True and append.ratio == pytest.approx(2.0 / 2.2)  # medians
    m.join_s["session"] = [1.1] * 3
    m.append_s["catalog"] = [2.3] * 3
    join, append = spark_views.results(m)
    assert join.met is False and append.met is False                        # 0.91×, 0.87×
