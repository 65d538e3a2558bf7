"""The alignment rule of ``core/protocol.py`` over thousands of random histories, against a
brute force written from docs/contract.md#alignment and ``docs/decisions.md``."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from metaservice.core.exactness import Exactness, MemoryHistory
from metaservice.core.protocol import OtherJob, choose_barrier, earliest_barrier, jobs_ahead
from tests.conftest import examples
from tests.metaservice.core.test_cuts import histories, ref_exact

# Jobs of the random histories: A writes a, B writes b (siblings on r1), C writes c, D writes d.
JOBS = {"A": ("a", ("r1",)), "B": ("b", ("r1",)), "C": ("c", ("a", "r2")),
        "D": ("d", ("a", "b"))}


def ref_choice(h: MemoryHistory, me: str, after: int | None,
               pins: dict[str, int | None]) -> int | None:
    sink, sources = JOBS[me]
    latests = [h.latest(s) for s in sources]
    if any(b is None for b in latests):
        return None

    def progress(job: str) -> int | None:
        done = h.latest(JOBS[job][0])
        values = [v for v in (done, pins[job]) if v is not None]
        return max(values) if values else None

    ahead = [j for j in JOBS if j != me and progress(j) is not None
             and (after is None or progress(j) > after)]  # type: ignore[operator]
    candidates = {b for s in sources for b in h.completed.get(s, {})}
    candidates |= {pins[j] for j in ahead if pins[j] is not None}  # type: ignore[misc]
    for b in sorted(candidates, reverse=True):
        if b > min(latests) or (after is not None and b <= after):  # type: ignore[type-var]
            continue
        if all(ref_exact(h, s, b) for s in sources) and all(
                pins[j] == b or ref_exact(h, JOBS[j][0], b) for j in ahead):
            return b
    return None


@settings(max_examples=examples(1500), deadline=None)
@given(histories(), st.sampled_from(sorted(JOBS)), st.none() | st.integers(0, 40),
       st.fixed_dictionaries({j: st.none() | st.integers(1, 40) for j in JOBS}))
def test_choice_matches_the_reference(h: MemoryHistory, me: str, after: int | None,
                                      pins: dict[str, int | None]) -> None:
    e = Exactness(h)
    others = [OtherJob(j, frozenset({JOBS[j][0]}), pins[j]) for j in JOBS if j != me]
    ahead = jobs_ahead(e, others, after)
    chosen = choose_barrier(e, list(JOBS[me][1]), after, ahead)
    assert chosen == ref_choice(h, me, after, pins)


def test_a_slow_sibling_follows_the_fast_one() -> None:
    # The fan-out of docs/contract.md#worked-examples: r has 10, 20, 30; B (t2) completed 20; A (t1)
    # is at 10.
    h = MemoryHistory(completed={"r": {10: 1, 20: 2, 30: 3}, "t1": {10: 11},
                                 "t2": {10: 21, 20: 22}},
                      writers={"t1": frozenset({"r"}), "t2": frozenset({"r"})})
    e = Exactness(h)
    ahead = jobs_ahead(e, [OtherJob("B", frozenset({"t2"}), None)], 10)
    assert choose_barrier(e, ["r"], 10, ahead) == 20  # not 30: t2 is not exact there
    # The leader takes the newest barrier; a sibling holding it is followed there.
    assert choose_barrier(e, ["r"], 20, []) == 30
    ahead = jobs_ahead(e, [OtherJob("B", frozenset({"t2"}), 30)], 10)
    assert choose_barrier(e, ["r"], 10, ahead) == 30


def test_earliest_barrier_walks_every_candidate_however_many() -> None:
    """Two derived sources that complete alternate barriers (a at even, b at odd ones) are
    exact together only at 1,000, after ~500 candidates: the answer is 1,000, not "none yet"
    (a bound on the candidates once turned this into a wait)."""
    a = {b: b for b in range(2, 1000, 2)} | {1000: 1000}
    b = {b: b for b in range(1, 1000, 2)} | {1000: 1000}
    h = MemoryHistory(completed={"a": a, "b": b, "r": {1: 1}},
                      writers={"a": frozenset({"r"}), "b": frozenset({"r"})})
    assert earliest_barrier(Exactness(h), ["a", "b"], [1, 2]) == 1000
    brute = [x for x in range(2, 1001) if ref_exact(h, "a", x) and ref_exact(h, "b", x)]
    assert brute[0] == 1000
