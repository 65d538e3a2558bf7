"""What a benchmark returns, and how the harness prints and records it.

Every module ``benchmarks/<name>.py`` exposes ``run(quick: bool) -> list[Result]``: one
``Result`` per figure, each measured side by side with the baseline it is compared to. The
harness (``python -m benchmarks``) prints the results as a table and writes them into the
generated section of ``docs/benchmarks.md``.

    from benchmarks._report import Result, percentile

    def run(quick: bool) -> list[Result]:
        ...
        return [Result.compare(
            "strong version p99, 10 tables (PostgreSQL)", p99_ms, "ms",
            baseline="pyiceberg snapshot scan", baseline_value=iceberg_ms,
            higher_is_better=False, at_least=100, goal="100× faster than pyiceberg")]

Every ratio has one direction: how many times better the figure is than its baseline, so > 1 is
better and < 1 worse whatever the unit (``baseline / value`` for latencies, ``value / baseline``
for throughputs). A compared figure's goal is a floor on that ratio (``at_least``), shown as
``≥ 0.77× (at most 1.3× SqlCatalog's latency)``: the floor, then the goal in the figure's own
terms. A goal written in the figure's unit (``≤ 10 ms``) is on the value, not the ratio.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Result:
    """One measured figure next to its baseline.

    ``ratio`` is how many times better the figure is than the baseline (> 1 is better, whatever
    the unit: for latencies ``baseline / value``, for throughputs ``value / baseline``).
    ``at_least`` is the goal's floor on ``ratio`` when the goal is on the ratio; ``goal`` says
    the goal in words. ``met`` is None when the figure has no goal or could not be judged.
    """

    figure: str
    value: float | None
    unit: str
    baseline: str | None = None
    baseline_value: float | None = None
    ratio: float | None = None
    at_least: float | None = None
    goal: str = ""
    met: bool | None = None
    notes: str = ""

    @classmethod
    def compare(cls, figure: str, value: float, unit: str, *, baseline: str,
                baseline_value: float, higher_is_better: bool, at_least: float, goal: str,
                notes: str = "") -> Result:
        """A figure with a baseline, met when it is at least ``at_least`` times better.

        ``goal`` is the same goal in the figure's own terms (e.g. ``at_least=1 / 1.3``, "at
        most 1.3× SqlCatalog's latency"); the table prints both.
        """
        ratio = better_ratio(value, baseline_value, higher_is_better=higher_is_better)
        return cls(figure, value, unit, baseline=baseline, baseline_value=baseline_value,
                   ratio=ratio, at_least=at_least, goal=goal,
                   met=None if ratio is None else ratio >= at_least, notes=notes)

    @classmethod
    def absolute(cls, figure: str, value: float, unit: str, *, goal: str,
                 met_if: Callable[[float], bool], notes: str = "") -> Result:
        """A figure judged against a fixed target (e.g. p99 ≤ 10 ms), no baseline."""
        return cls(figure, value, unit, goal=goal, met=bool(met_if(value)), notes=notes)


def better_ratio(value: float | None, baseline: float | None, *,
                 higher_is_better: bool) -> float | None:
    """How many times better ``value`` is than ``baseline`` (None when undefined)."""
    if value is None or baseline is None:
        return None
    num, den = (value, baseline) if higher_is_better else (baseline, value)
    if den == 0:
        return None if num == 0 else math.inf
    return num / den


def percentile(samples: Sequence[float], p: float) -> float:
    """The p-th percentile (0–100) by linear interpolation between closest ranks."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    k = (len(ordered) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def format_number(value: float | None) -> str:
    if value is None:
        return "—"
    if math.isinf(value):
        return "∞"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def format_ratio(ratio: float | None) -> str:
    return "—" if ratio is None else f"{format_number(ratio)}×"


def format_goal(result: Result) -> str:
    """``≥ 0.77× (at most 1.3× SqlCatalog's latency)`` for a goal on the ratio, else the goal."""
    if result.at_least is None:
        return result.goal or "—"
    floor = f"≥ {round(result.at_least, 2):g}×"
    return f"{floor} ({result.goal})" if result.goal else floor


def format_met(met: bool | None) -> str:
    return {True: "met", False: "NOT met", None: "—"}[met]


COLUMNS = ("figure", "value", "baseline", "baseline value", "vs baseline (> 1× = better)", "goal",
           "met")


def rows(results: Sequence[Result]) -> list[tuple[str, ...]]:
    return [(r.figure, f"{format_number(r.value)} {r.unit}".strip(), r.baseline or "—",
             f"{format_number(r.baseline_value)} {r.unit}".strip()
             if r.baseline_value is not None else "—",
             format_ratio(r.ratio), format_goal(r), format_met(r.met)) for r in results]


def text_table(results: Sequence[Result]) -> str:
    """A plain-text table for the terminal, notes below it."""
    body = rows(results)
    widths = [max(len(c), *(len(row[i]) for row in body)) if body else len(c)
              for i, c in enumerate(COLUMNS)]
    line = "  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in body]
    out += [f"  * {r.figure}: {r.notes}" for r in results if r.notes]
    return "\n".join(out)


def markdown_table(results: Sequence[Result]) -> str:
    """A Markdown table, notes as a list below it."""
    def cell(v: str) -> str:
        return v.replace("|", "\\|")

    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows(results)]
    notes = [f"- *{r.figure}*: {r.notes}" for r in results if r.notes]
    if notes:
        out += ["", *notes]
    return "\n".join(out)


__all__ = ["Result", "better_ratio", "percentile", "text_table", "markdown_table"]
