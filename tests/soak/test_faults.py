"""The fault schedule: the same seed gives the same faults, every kind at least once, spread
over the active window, never in the warm-up or the quiet end."""

from __future__ import annotations

import pytest

from metaservice_soak.faults import (
    DATABASE_CRASH,
    KINDS,
    SERVER_KILL,
    SPARK_JOB_ROLES,
    STALLED_JOIN,
    ScheduleShape,
    schedule,
)


@pytest.mark.parametrize("seconds", [150, 1800])
def test_every_kind_in_the_active_window(seconds: float) -> None:
    shape = ScheduleShape.for_run(seconds)
    for seed in range(20):
        plan = schedule(seed, shape)
        assert {f.kind for f in plan} == set(KINDS)
        times = [f.at for f in plan]
        assert times == sorted(times)
        assert all(shape.warmup <= t <= seconds - shape.quiet for t in times)
        for fault in plan:
            if fault.kind == STALLED_JOIN:
                assert fault.hold_seconds >= 1
                assert fault.at + fault.hold_seconds <= seconds
        joins = [f for f in plan if f.kind == STALLED_JOIN]
        for this, following in zip(joins, joins[1:], strict=False):
            assert this.at + this.hold_seconds <= following.at - 4.99  # one at a time
            if fault.kind in (SERVER_KILL, DATABASE_CRASH):
                assert shape.down_seconds[0] <= fault.down_seconds <= shape.down_seconds[1]
            if fault.kind == SERVER_KILL:
                assert fault.target in ("server-1", "server-2")
            if fault.kind == "driver_kill":
                assert fault.target in SPARK_JOB_ROLES


def test_the_seed_decides() -> None:
    shape = ScheduleShape.for_run(1800)
    assert schedule(7, shape) == schedule(7, shape)
    assert schedule(7, shape) != schedule(8, shape)
    assert len(schedule(7, shape)) == round((1800 - 240) / 70)


def test_a_backend_without_a_database_crash() -> None:
    kinds = tuple(k for k in KINDS if k != DATABASE_CRASH)
    plan = schedule(3, ScheduleShape.for_run(150), kinds=kinds, replicas=1)
    assert {f.kind for f in plan} == set(kinds)
    assert {f.target for f in plan if f.kind == SERVER_KILL} == {"server-1"}


def test_a_run_too_short_for_faults_is_refused() -> None:
    with pytest.raises(ValueError, match="no time for faults"):
        schedule(1, ScheduleShape.for_run(29))
