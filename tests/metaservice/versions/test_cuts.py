"""The pure cut computation of SPEC §4."""

from __future__ import annotations

from metaservice.versions.cuts import (
    TableState,
    compute_strong_cut,
    compute_weak_cut,
    has_caught_up,
    tables_behind,
    tables_catching_up_after_join,
)


def test_strong_cut_is_the_min_over_caught_up_tables() -> None:
    states = [TableState("t1", 30), TableState("t2", 20), TableState("t3", 5, catching_up=True)]
    assert compute_strong_cut(states) == 20


def test_strong_cut_ignores_tables_without_barriers() -> None:
    assert compute_strong_cut([TableState("t1", 30), TableState("t2", None)]) == 30
    assert compute_strong_cut([TableState("t2", None)]) is None


def test_weak_cut_needs_every_requested_table() -> None:
    assert compute_weak_cut([TableState("t1", 30), TableState("t2", 20)]) == 20
    assert compute_weak_cut([TableState("t1", 30), TableState("t2", None)]) is None


def test_explicit_barrier_lists_the_tables_behind() -> None:
    states = [TableState("b", 20), TableState("a", 30), TableState("c", None)]
    assert tables_behind(states, 30) == ["b", "c"]
    assert tables_behind(states, 20) == ["c"]


def test_joining_tables_behind_the_old_cut_are_catching_up() -> None:
    merged = [TableState("old1", 50), TableState("old2", 40), TableState("new", 10),
              TableState("empty", None)]
    assert tables_catching_up_after_join(merged, [40, None]) == {"new", "empty"}
    assert tables_catching_up_after_join(merged, [None]) == {"empty"}


def test_a_catching_up_table_rejoins_at_the_cut() -> None:
    assert has_caught_up(40, 40)
    assert not has_caught_up(39, 40)
    assert has_caught_up(1, None)
