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
