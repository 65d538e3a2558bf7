"""The wall-clock barrier rule, ``max(now_ms, latest + 1)``, written once in the plugin."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import spark_plugin as sp

PLUGIN_SOURCE = Path(sp.__file__).resolve().parent


def test_the_barrier_is_the_wall_clock_in_ms_when_it_is_past_the_latest() -> None:
    before = time.time_ns() // 1_000_000
    barrier = sp.barrier_after(before - 10_000, None)
    after = time.time_ns() // 1_000_000
    assert before <= barrier <= after


def test_the_barrier_follows_the_latest_when_the_clock_is_not_past_it() -> None:
    future = time.time_ns() // 1_000_000 + 3_600_000
    assert sp.barrier_after(future) == future + 1
    assert sp.barrier_after(5, future, None, future - 1) == future + 1


def test_no_latest_barrier_gives_the_wall_clock() -> None:
    before = time.time_ns() // 1_000_000
    assert sp.barrier_after() >= before
    assert sp.barrier_after(None, None) >= before


def test_the_rule_is_written_once_in_the_plugin() -> None:
    """No ``max(...)`` of the wall clock outside ``_barriers``: the root ingestion, the streaming
    sink and the batch job call :func:`spark_plugin.barrier_after`."""
    found = []
    for path in PLUGIN_SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "max"):
                continue
            if any(isinstance(inner, ast.Attribute) and inner.attr in ("time", "time_ns")
                   and getattr(inner.value, "id", None) == "time" for inner in ast.walk(node)):
                found.append(path.relative_to(PLUGIN_SOURCE).as_posix())
    assert found == ["_barriers.py"], found


def test_a_barrier_prints_as_a_utc_time_to_the_millisecond() -> None:
    # docs/concepts.md#barrier: 1764284400000 is 2025-11-27 23:00:00 UTC
    assert sp.barrier_text(1764284400250) == "2025-11-27 23:00:00.250 UTC"
    assert sp.barrier_text(1764284400250, integer=True) == \
        "2025-11-27 23:00:00.250 UTC (1764284400250)"
    # a counter (the walk-throughs' 10, 20, 30) is no time; no barrier is a dash
    assert sp.barrier_text(30) == "30" and sp.barrier_text(30, integer=True) == "30"
    assert sp.barrier_text(None) == "—"


def test_the_server_prints_barriers_as_the_plugin_does() -> None:
    from metaservice.core.barrier_time import barrier_text

    for barrier in (None, 0, 30, 946_684_799_999, 946_684_800_000, 1764284400250,
                    1795820710250):
        for integer in (False, True):
            assert barrier_text(barrier, integer=integer) == \
                sp.barrier_text(barrier, integer=integer)


def test_the_demo_prints_barriers_as_times_and_the_cut_with_its_integer() -> None:
    from metaservice_demo import demo

    assert demo.clock(1764284400250) == "2025-11-27 23:00:00.250 UTC"
    assert demo.clock(1764284400250, integer=True).endswith("UTC (1764284400250)")
    assert "docs/concepts.md#barrier" in demo.BARRIER_NOTE


def test_the_demo_lag_table_prints_barriers_as_times() -> None:
    from metaservice_demo import demo

    class Client:
        def request(self, *args: object, **kwargs: object) -> dict[str, object]:
            return {"tables": [{"table": demo.ORDERS, "latest_barrier": 1764284400250,
                                "lag_ms": 1500, "writer_job": None}], "bottleneck": None}

    lines = demo.delay_lines(Client())
    orders = next(line for line in lines if line.startswith(demo.ORDERS))
    assert "2025-11-27 23:00:00.250 UTC" in orders and "1764284400250" not in orders


def test_a_blocking_wait_of_the_demo_prints_its_progress(capsys) -> None:  # type: ignore[no-untyped-def]
    import time as clock

    from metaservice_demo import demo

    console = demo.Console()
    with demo.ticking(console, "spark", "starting the JVM", every=0.05):
        clock.sleep(0.3)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 2 and all("spark    … starting the JVM (" in x for x in lines), lines
