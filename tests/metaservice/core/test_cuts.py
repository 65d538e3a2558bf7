"""Exactness and the cuts of docs/contract.md#exactness and docs/contract.md#consistent-versions,
in-process over plain histories.

The reference below is written from the contract's words alone, as a brute force over every barrier;
hypothesis compares it with ``core/exactness.py`` (which walks bounds and seeks) over
thousands of random histories of chains, fan-outs and fan-ins.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from metaservice.core.cuts import (
    StrongCut,
    TableState,
    compute_strong_cut,
    compute_weak_cut,
    floors_after_join,
    tables_behind,
    tables_holding_cut,
    tables_not_exact,
)
from metaservice.core.exactness import Exactness, MemoryHistory
from tests.conftest import examples

# -- the reference ------------------------------------------------------------------------


def ref_snap(rows: dict[int, int], b: int) -> tuple[int, int] | None:
    below = [x for x in rows if x <= b]
    return None if not below else (max(below), rows[max(below)])


def ref_exact(h: MemoryHistory, t: str, b: int) -> bool:
    rows = h.completed.get(t, {})
    if not rows or b < min(rows) or b > max(rows):
        return False
    sources = h.writers.get(t)
    if sources is None or b in rows:
        return True
    done, _ = ref_snap(rows, b)  # type: ignore[misc]
    for s in sources:
        at_done, at_b = ref_snap(h.completed.get(s, {}), done), ref_snap(h.completed.get(s, {}), b)
        if (at_done and at_done[1]) != (at_b and at_b[1]) or not ref_exact(h, s, b):
            return False
    return True


def ref_greatest_common(h: MemoryHistory, tables: list[str], upper: int) -> int | None:
    candidates = sorted({b for t in tables for b in h.completed.get(t, {}) if b <= upper},
                        reverse=True)
    for b in candidates:
        if all(ref_exact(h, t, b) for t in tables):
            return b
    return None


# -- the contract's worked examples ------------------------------------------------------------


def chain_example() -> MemoryHistory:
    return MemoryHistory(
        completed={"t1": {10: 101, 20: 102, 30: 103}, "t2": {10: 201, 20: 202}, "t3": {25: 301}},
        writers={"t2": frozenset({"t1"})})


def fan_out_example() -> MemoryHistory:
    return MemoryHistory(
        completed={"r": {10: 101, 20: 102, 30: 103}, "t1": {10: 111, 30: 113},
                   "t2": {10: 121, 20: 122}},
        writers={"t1": frozenset({"r"}), "t2": frozenset({"r"})})


def states(h: MemoryHistory, names: list[str]) -> list[TableState]:
    return [TableState(n, h.latest(n)) for n in names]


def test_chain_worked_example() -> None:
    h = chain_example()
    e = Exactness(h)
    assert compute_strong_cut(e, states(h, ["t1", "t2"])).barrier == 20
    assert compute_strong_cut(e, states(h, ["t3"])).barrier == 25
    assert compute_weak_cut(e, states(h, ["t1"])) == 30
    assert compute_weak_cut(e, states(h, ["t1", "t2"])) == 20
    assert tables_behind(states(h, ["t1", "t2"]), 30) == ["t2"]


def test_fan_out_worked_example() -> None:
    h = fan_out_example()
    e = Exactness(h)
    assert [b for b in (10, 20, 30) if e.is_exact("t1", b)] == [10, 30]
    assert [b for b in (10, 20, 30) if e.is_exact("t2", b)] == [10, 20]
    assert compute_strong_cut(e, states(h, ["r", "t1", "t2"])).barrier == 10
    assert compute_weak_cut(e, states(h, ["t1", "r"])) == 30
    assert compute_weak_cut(e, states(h, ["t2", "r"])) == 20
    assert compute_weak_cut(e, states(h, ["t1", "t2"])) == 10
    assert tables_not_exact(e, ["t1", "t2"], 20) == {"t1": (10, 30)}


def test_a_heartbeat_of_the_source_keeps_a_skipping_sink_exact() -> None:
    # r's snapshot did not change at 20: t1 holds exactly the data up to 20 too.
    h = MemoryHistory(completed={"r": {10: 1, 20: 1, 30: 3}, "t1": {10: 11, 30: 13}},
                      writers={"t1": frozenset({"r"})})
    assert Exactness(h).is_exact("t1", 20)


def test_catching_up_tables_hold_the_component_at_their_floor() -> None:
    h = MemoryHistory(completed={"r": {10: 1, 20: 2, 30: 3}, "t": {10: 11}},
                      writers={"t": frozenset({"r"})})
    e = Exactness(h)
    held = compute_strong_cut(e, [TableState("r", 30), TableState("t", 10, True, 20)])
    assert held.barrier == 20 and not held.rejoined
    h.completed["t"][30] = 13  # type: ignore[index]
    e = Exactness(h)
    joined = compute_strong_cut(e, [TableState("r", 30), TableState("t", 30, True, 20)])
    assert joined.barrier == 30 and joined.rejoined


def test_joining_tables_not_exact_at_the_old_cut_are_catching_up() -> None:
    h = MemoryHistory(completed={"old1": {40: 1, 50: 2}, "old2": {40: 3}, "new": {10: 4}},
                      writers={"new": frozenset({"old2"})})
    e = Exactness(h)
    merged = [TableState(n, h.latest(n)) for n in ("old1", "old2", "new")] + [
        TableState("empty", None)]
    assert floors_after_join(e, merged, [40, None]) == (40, {"new", "empty"})
    assert floors_after_join(e, merged, [None]) == (None, {"empty"})


def test_a_floor_no_table_of_the_component_completed_moves_up_to_the_next_one() -> None:
    """A split leaves the barrier 25 (completed by a table now elsewhere) as the greatest cut
    served to r and t: a cut of theirs must be a barrier one of them completed, and not below
    25, so the floor is 30, and t, not exact there, catches up."""
    h = MemoryHistory(completed={"r": {10: 1, 20: 2, 30: 3, 40: 4}, "t": {20: 11}},
                      writers={"t": frozenset({"r"})})
    e = Exactness(h)
    split = [TableState("r", 40), TableState("t", 20)]
    assert floors_after_join(e, split, [25, 20]) == (30, {"t"})
    assert floors_after_join(e, split, [20]) == (20, set())  # one r completed: kept


# -- random histories against the reference ------------------------------------------------

TABLES = ["r1", "r2", "a", "b", "c", "d"]
# r1, r2 roots; a, b siblings of r1; c reads a and r2 (fan-in); d reads a and b (fan-in).
WRITERS = {"a": frozenset({"r1"}), "b": frozenset({"r1"}), "c": frozenset({"a", "r2"}),
           "d": frozenset({"a", "b"})}


@st.composite
def histories(draw: st.DrawFn) -> MemoryHistory:
    barriers = sorted(draw(st.sets(st.integers(1, 40), min_size=1, max_size=12)))
    completed: dict[str, dict[int, int]] = {}
    snapshot = iter(range(1, 10_000))
    for root in ("r1", "r2"):
        rows: dict[int, int] = {}
        for b in draw(st.lists(st.sampled_from(barriers), unique=True, max_size=10)):
            rows[b] = 0
        current = None
        for b in sorted(rows):  # a new snapshot or a heartbeat of the latest
            if current is None or draw(st.booleans()):
                current = next(snapshot)
            rows[b] = current
        completed[root] = rows
    for derived in ("a", "b", "c", "d"):
        rows = {}
        for b in sorted(draw(st.lists(st.sampled_from(barriers), unique=True, max_size=8))):
            rows[b] = next(snapshot)
        completed[derived] = rows
    return MemoryHistory(completed=completed, writers=WRITERS)


@settings(max_examples=examples(700), deadline=None)
@given(histories(), st.integers(0, 45))
def test_exactness_matches_the_reference(h: MemoryHistory, b: int) -> None:
    e = Exactness(h)
    for t in TABLES:
        assert e.is_exact(t, b) == ref_exact(h, t, b), (t, b)
        bound = e.bound(t, b)
        greatest = ref_greatest_common(h, [t], b)
        # The bound is an upper bound of the greatest exact barrier ≤ b.
        assert (bound is None) == (greatest is None and not any(
            ref_exact(h, t, x) for x in range(0, b + 1)))
        if greatest is not None:
            assert bound is not None and bound >= greatest


@settings(max_examples=examples(700), deadline=None)
@given(histories(), st.lists(st.sampled_from(TABLES), min_size=1, max_size=6, unique=True),
       st.integers(0, 45))
def test_greatest_common_matches_the_reference(h: MemoryHistory, tables: list[str],
                                               upper: int) -> None:
    assert Exactness(h).greatest_common(tables, upper) == ref_greatest_common(h, tables, upper)


def test_a_cut_is_held_only_where_the_caught_up_tables_would_serve_more() -> None:
    """r → A → t1 → B → t2, t2 joined at the floor 10 and has no barrier."""
    h = MemoryHistory(completed={"r": {10: 1, 20: 2}, "t1": {10: 11}, "t2": {}},
                      writers={"t1": frozenset({"r"}), "t2": frozenset({"t1"})})
    e = Exactness(h)
    r, t1 = TableState("r", 20), TableState("t1", 10)
    t2 = TableState("t2", None, catching_up=True, catch_up_floor=10)
    cut = compute_strong_cut(e, [r, t1, t2])
    assert cut == StrongCut(10, rejoined=False)
    # t1 has nothing after the floor: the cut would be 10 without t2 too.
    assert tables_holding_cut(e, [r, t1, t2], cut) == []
    # Rejoined, or no cut at all (no_version's holding_back says that): not a hold.
    assert tables_holding_cut(e, [r, t1, t2], StrongCut(10, rejoined=True)) == []
    assert tables_holding_cut(e, [r, t1, t2], StrongCut(None, rejoined=False)) == []

    h = MemoryHistory(completed={"r": {10: 1, 20: 2}, "t1": {10: 11, 20: 12}, "t2": {}},
                      writers=h.writers)
    e = Exactness(h)
    t1 = TableState("t1", 20)
    cut = compute_strong_cut(e, [r, t1, t2])
    assert cut == StrongCut(10, rejoined=False)
    assert tables_holding_cut(e, [t2, t1, r], cut) == [t2]
