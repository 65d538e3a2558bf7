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


class _Role:
    def __init__(self, alive: bool) -> None:
        self._alive = alive

    def alive(self) -> bool:
        return self._alive


class _Roles:
    """The soak's roles as a driver kill sees them: which run, and the kill."""

    def __init__(self, alive: dict[str, bool]) -> None:
        self.roles = {name: _Role(up) for name, up in alive.items()}
        self.killed: list[str] = []

    def kill(self, name: str) -> int:
        self.killed.append(name)
        return 4242


@pytest.mark.parametrize(("alive", "killed"), [
    ({"sibling_batch": True, "sibling_stream": True, "join": True}, ["sibling_stream"]),
    ({"sibling_batch": True, "sibling_stream": False, "join": True}, ["sibling_batch"]),
    ({"sibling_batch": False, "sibling_stream": False, "join": False}, []),
])
def test_a_driver_kill_whose_driver_is_being_restarted_kills_another_jobs(
        tmp_path, alive: dict[str, bool], killed: list[str]) -> None:
    """A driver kill planned for a job whose driver exited on its own (a loaded machine) ends
    another Spark job's driver instead, so that a short soak still has every kind of fault; the
    record names the driver it ended and the one planned."""
    from metaservice_soak.faults import DRIVER_KILL, Fault
    from metaservice_soak.harness import Soak, SoakConfig

    soak = Soak(SoakConfig(minutes=1, seed=1, backend="sqlite", state=tmp_path))
    soak.roles, soak.servers = _Roles(alive), object()  # type: ignore[assignment]
    soak.driver_restart_wait = 0
    soak._inject(Fault(at=33.0, kind=DRIVER_KILL, target="sibling_stream"))
    [record] = soak.fault_log.read()
    assert soak.roles.killed == killed
    if killed:
        assert record.target == killed[0] and record.detail["pid"] == 4242
        assert ("planned" in record.detail) == (killed != ["sibling_stream"])
    else:
        assert record.target == "sibling_stream" and "skipped" in record.detail


def test_a_run_on_s3_kills_its_object_store_too() -> None:
    """``--storage s3`` adds ``store_kill`` to the backend's kinds: SeaweedFS down for a few
    seconds, then started again on its data."""
    from metaservice_soak.faults import STORE_KILL
    from metaservice_soak.harness import SoakConfig

    kinds = SoakConfig(minutes=1, seed=1, backend="sqlite", storage="s3").fault_kinds()
    assert set(kinds) == {"driver_kill", SERVER_KILL, STALLED_JOIN, STORE_KILL}
    assert STORE_KILL not in SoakConfig(minutes=1, seed=1, backend="sqlite").fault_kinds()
    shape = ScheduleShape.for_run(60)
    plan = schedule(5, shape, kinds=kinds, replicas=1)
    (kill,) = [f for f in plan if f.kind == STORE_KILL]
    assert kill.target == "seaweedfs"
    assert shape.down_seconds[0] <= kill.down_seconds <= shape.down_seconds[1]
