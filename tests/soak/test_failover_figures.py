"""The failover test's figure, time to the first successful write: counted from the fault to
the first write that succeeded once writes had stopped failing."""

from __future__ import annotations

from metaservice_soak.patroni import time_to_first_write


def test_a_killed_leader_s_outage_ends_with_the_first_success() -> None:
    writes = [(99.0, 99.1, True),  # before the fault
              (100.2, 101.0, False), (101.2, 103.0, False), (103.2, 115.0, True)]
    assert time_to_first_write(writes, 100.0, 30) == 15.0


def test_writes_a_frozen_leader_still_took_do_not_count() -> None:
    # the frozen leader's PostgreSQL committed at 100.5 until haproxy cut it off; the outage
    # ended with the write sent at 114
    writes = [(100.1, 100.5, True), (101.0, 103.0, False), (113.0, 113.5, False),
              (114.0, 116.0, True), (114.5, 116.5, True)]
    assert time_to_first_write(writes, 100.0, 30) == 16.0


def test_a_switchover_without_a_failed_write_and_none_yet() -> None:
    assert time_to_first_write([(100.5, 101.0, True)], 100.0, 30) == 1.0
    assert time_to_first_write([(100.5, 101.0, False)], 100.0, 30) is None
    # a failure after the window is another matter
    assert time_to_first_write([(101.0, 102.0, True), (140.0, 141.0, False)], 100.0,
                               30) == 2.0
