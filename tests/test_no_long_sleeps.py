"""No test waits by sleeping a second or more: a test waits for the event it needs (an answer, a
file, a count, a thread), which comes sooner on a fast machine and still comes on a slow one.
A fixed sleep of a second or more in ``tests/`` fails here, unless the allowlist below names it
with the reason it must be a sleep."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

LONGEST = 1.0
"""Seconds: a constant sleep this long or longer is a fixed wait."""

ALLOWED: dict[str, str] = {
    # "path relative to tests/::function": "why it must sleep",
    "spark_plugin/test_demo.py::start_spark_interrupted":
        "a bound, not a wait: the SIGTERM it sent itself ends the sleep at once",
}


def _sleeps(tree: ast.AST) -> list[tuple[str, int, float]]:
    """(enclosing function, line, seconds) of each ``sleep(<constant>)`` call, whatever the
    module it comes from (``time.sleep``, ``asyncio.sleep``, a bare ``sleep``)."""
    found: list[tuple[str, int, float]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Call) and node.args:
            name = (node.func.attr if isinstance(node.func, ast.Attribute)
                    else node.func.id if isinstance(node.func, ast.Name) else "")
            if name == "sleep":
                try:
                    seconds = ast.literal_eval(node.args[0])
                except ValueError:
                    seconds = None  # computed: judged by the events around it, not here
                if isinstance(seconds, int | float):
                    found.append((function, node.lineno, float(seconds)))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "<module>")
    return found


def test_no_test_sleeps_a_second_or_more() -> None:
    long_sleeps = []
    for path in sorted(TESTS.rglob("*.py")):
        relative = path.relative_to(TESTS).as_posix()
        for function, line, seconds in _sleeps(ast.parse(path.read_text(), str(path))):
            if seconds >= LONGEST and f"{relative}::{function}" not in ALLOWED:
                long_sleeps.append(f"tests/{relative}:{line} ({function}) sleeps {seconds:g} s")
    assert not long_sleeps, ("wait for the event instead of a fixed time:\n"
                             + "\n".join(long_sleeps))


def test_the_check_finds_a_long_sleep_in_any_spelling() -> None:
    source = """
import asyncio, time
from time import sleep
def a():
    time.sleep(2)
async def b():
    await asyncio.sleep(1)
def c():
    sleep(1.5)
    time.sleep(0.2)
    time.sleep(delay)
"""
    assert [(f, s) for f, _, s in _sleeps(ast.parse(source)) if s >= LONGEST] == [
        ("a", 2.0), ("b", 1.0), ("c", 1.5)]
