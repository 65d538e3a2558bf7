"""The barrier protocol's rulebook (``metaservice/core/protocol.py``) on plain values: each
refusal, in the order its request asks it, with no database and no server.

The same rules answer over HTTP on both backends: :func:`test_every_refusal_is_asserted_on_the_wire`
holds that each error code the rulebook raises is asserted through the API by some test.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from metaservice import errors
from metaservice.core import protocol
from metaservice.core.protocol import CommitChecks, RecordedBarrier, SinkCommit

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Table:
    name: str = "lake.db.t"
    latest_barrier: int | None = 100
    latest_snapshot_id: int | None = 10
    writer_job: str | None = None


@dataclass(frozen=True)
class Job:
    state: str = "running"
    pinned_barrier: int | None = 200
    pin_invalidated_reason: str | None = None


CLEAN = CommitChecks(fence_plan=None, existing=None, snapshot_barrier=None)


def sink_commit(**changes: object) -> SinkCommit:
    base = SinkCommit(job_name="etl", job=Job(), table_name="lake.db.t",
                      table=Table(writer_job="etl"), is_sink=True, has_sources=True,
                      barrier=200, target=200, snapshot_id=11, checks=CLEAN, via_catalog=False)
    return replace(base, **changes)  # type: ignore[arg-type]


def admit(commit: SinkCommit, *, held: bool = False) -> protocol.Completion:
    return protocol.admit_sink_commit(commit, table_names=lambda: ["lake.db.orders"],
                                      held_by_catalog=lambda: held)


def refused(error: type[errors.MetaServiceError], call, *args, **kwargs) -> errors.MetaServiceError:  # type: ignore[no-untyped-def]
    with pytest.raises(error) as raised:
        call(*args, **kwargs)
    return raised.value


# -- every request ----------------------------------------------------------------------------


def test_a_barrier_beyond_the_bound_is_refused_and_the_bound_is_inclusive() -> None:
    rule = protocol.refuse_barrier_in_future
    rule(1_000 + 2_000, now_ms=1_000, max_ahead_seconds=2)  # at the bound
    for keyword in ("latest", "resume", None, True):
        rule(keyword, now_ms=0, max_ahead_seconds=0)  # type: ignore[arg-type]
    error = refused(errors.BarrierInFutureError, rule, 3_001, now_ms=1_000, max_ahead_seconds=2)
    assert error.details == {"barrier": 3_001, "max_barrier": 3_000,
                             "max_barrier_ahead_seconds": 2}


def test_next_abort_and_commit_are_asked_of_a_running_job() -> None:
    refused(errors.UnknownJobError, protocol.refuse_not_running, "etl", None)
    error = refused(errors.JobNotRunningError, protocol.refuse_not_running, "etl",
                    Job(state="planned"))
    assert error.details == {"job": "etl", "state": "planned"}
    protocol.refuse_not_running("etl", Job())


# -- plan and start ---------------------------------------------------------------------------


def test_plan_and_start_refusals() -> None:
    refused(errors.JobNotPlannedError, protocol.refuse_edge_of_running_job, "etl", "running")
    protocol.refuse_edge_of_running_job("etl", "planned")
    error = refused(errors.CycleError, protocol.refuse_cycle, ["a", "b", "a"])
    assert error.details == {"path": ["a", "b", "a"]} and "a -> b -> a" in str(error)
    protocol.refuse_cycle(None)
    refused(errors.JobNotPlannedError, protocol.refuse_start_of_terminated, "etl", "terminated")
    protocol.refuse_start_of_terminated("etl", "planned")


def test_a_sink_written_by_another_job_names_the_first_by_name() -> None:
    error = refused(errors.TableHasWriterError, protocol.refuse_sink_of_another_job, "etl",
                    {"lake.db.z": "other", "lake.db.b": "third", "lake.db.a": "etl"})
    assert error.details == {"table": "lake.db.b", "writer": "third"}
    protocol.refuse_sink_of_another_job("etl", {"lake.db.a": "etl", "lake.db.b": None})


def test_a_start_at_a_barrier_needs_it_complete_then_exact_then_pinned() -> None:
    error = refused(errors.BarrierNotCompleteError, protocol.refuse_start_at, 5,
                    behind=["lake.db.a"], not_exact={"lake.db.b": (3, 7)})
    assert error.details["tables"] == ["lake.db.a"]
    error = refused(errors.BarrierNotExactError, protocol.refuse_start_at, 5, behind=[],
                    not_exact={"lake.db.b": (3, 7)})
    assert error.details["nearest"] == {"lake.db.b": {"below": 3, "above": 7}}
    protocol.refuse_start_at(5, behind=[], not_exact={})
    refused(errors.SnapshotExpiredError, protocol.refuse_unpinned_start, 5, action="wait",
            expired=True)
    refused(errors.NoVersionError, protocol.refuse_unpinned_start, 5, action="wait",
            expired=False)
    protocol.refuse_unpinned_start(5, action="process", expired=False)


def test_next_refuses_a_previous_snapshot_approved_for_expiration() -> None:
    protocol.refuse_expired_previous([])
    error = refused(errors.SnapshotExpiredError, protocol.refuse_expired_previous,
                    [{"table": "lake.db.a", "snapshot_id": 4}])
    assert error.details == {"snapshots": [{"table": "lake.db.a", "snapshot_id": 4}]}


# -- commit -----------------------------------------------------------------------------------


def test_a_commit_of_the_pinned_barrier_is_new() -> None:
    assert admit(sink_commit()) == "new"


@pytest.mark.parametrize(("changes", "error"), [
    ({"job": None}, errors.UnknownJobError),
    ({"table": None, "checks": None, "is_sink": False}, errors.UnknownTableError),
    ({"is_sink": False, "checks": None}, errors.NotASinkError),
    ({"job": Job(state="terminated")}, errors.JobNotRunningError),
    ({"checks": replace(CLEAN, fence_plan="p1")}, errors.RollbackInProgressError),
    ({"job": Job(pin_invalidated_reason="rollback of lake.db.a")}, errors.BarrierRolledBackError),
    ({"barrier": None, "target": None}, errors.InvalidRequestError),
    ({"barrier": 100, "target": 100}, errors.BarrierRegressionError),
    ({"barrier": 150, "target": 150}, errors.UnknownBarrierError),
    ({"checks": replace(CLEAN, expiration_approved=True)}, errors.SnapshotExpiredError),
    ({"checks": replace(CLEAN, existing=RecordedBarrier(12, False, "x"))},
     errors.BarrierRegressionError),
    ({"checks": replace(CLEAN, snapshot_barrier=90)}, errors.BarrierRegressionError),
])
def test_each_refusal_of_a_commit(changes: dict[str, object],
                                  error: type[errors.MetaServiceError]) -> None:
    refused(error, admit, sink_commit(**changes))


def test_the_rules_of_a_commit_are_asked_in_order() -> None:
    """Each case breaks two rules: the one asked first answers."""
    everything_wrong = sink_commit(job=Job(state="terminated"), is_sink=False, checks=None)
    refused(errors.NotASinkError, admit, everything_wrong)
    refused(errors.JobNotRunningError, admit,
            sink_commit(job=Job(state="terminated"), checks=replace(CLEAN, fence_plan="p")))
    refused(errors.HeldByCatalogError, lambda: admit(
        sink_commit(checks=replace(CLEAN, fence_plan="p")), held=True))
    refused(errors.RollbackInProgressError, admit,
            sink_commit(checks=replace(CLEAN, fence_plan="p"),
                        job=Job(pin_invalidated_reason="r")))
    # barrier_regression (its latest) before unknown_barrier (not the pinned one)
    refused(errors.BarrierRegressionError, admit, sink_commit(barrier=90, target=90))
    unknown = refused(errors.UnknownTableError, admit,
                      sink_commit(table=None, checks=None, is_sink=False,
                                  table_name="lake.db.order"))
    assert unknown.details["close_matches"]["lake.db.order"][0]["table"] == "lake.db.orders"


def test_a_commit_through_the_catalog_is_not_refused_as_held_by_it() -> None:
    refused(errors.HeldByCatalogError, lambda: admit(sink_commit(), held=True))
    assert protocol.admit_sink_commit(
        sink_commit(via_catalog=True), table_names=list,
        held_by_catalog=pytest.fail) == "new"  # type: ignore[arg-type]


def test_a_repeat_of_the_jobs_own_commit_answers_as_the_first_even_once_it_stopped() -> None:
    own = replace(CLEAN, existing=RecordedBarrier(11, False, "etl"), snapshot_barrier=200)
    assert admit(sink_commit(checks=own, job=Job(state="terminated"))) == "own_repeat"
    # The same row written by someone else is a repeat, not the job's own: the job must run.
    theirs = replace(own, existing=RecordedBarrier(11, False, "other"))
    assert admit(sink_commit(checks=theirs)) == "repeat"
    refused(errors.JobNotRunningError, admit,
            sink_commit(checks=theirs, job=Job(state="terminated")))
    # A rolled-back row is completed again: new.
    rolled = replace(CLEAN, existing=RecordedBarrier(11, True, "etl"))
    assert admit(sink_commit(checks=rolled)) == "new"


def test_a_job_without_sources_commits_the_barrier_it_was_assigned() -> None:
    assert admit(sink_commit(has_sources=False, barrier=None, target=101,
                             job=Job(pinned_barrier=None))) == "new"
    refused(errors.BarrierRegressionError, admit,
            sink_commit(has_sources=False, barrier=100, target=100))


# -- root reports -----------------------------------------------------------------------------


def report(table: Table = Table(), checks: CommitChecks = CLEAN, *, barrier: int = 200,
           snapshot_id: int = 11, held: bool = False) -> bool:
    return protocol.admit_root_report(table, checks, barrier=barrier, snapshot_id=snapshot_id,
                                      held_by_catalog=lambda: held)


def test_each_refusal_of_a_root_report_in_order() -> None:
    assert report() is True
    refused(errors.HeldByCatalogError, report, held=True)
    refused(errors.HeldByCatalogError, report, Table(writer_job="etl"), held=True)
    refused(errors.TableHasWriterError, report, Table(writer_job="etl"),
            replace(CLEAN, fence_plan="p"))
    refused(errors.RollbackInProgressError, report, checks=replace(CLEAN, fence_plan="p"),
            barrier=50)
    refused(errors.BarrierRegressionError, report, barrier=100)


def test_a_heartbeat_of_a_catalog_table_is_never_asked_whether_the_catalog_holds_it() -> None:
    assert protocol.admit_root_report(Table(), CLEAN, barrier=300, snapshot_id=10,
                                      held_by_catalog=pytest.fail) is True  # type: ignore[arg-type]


# -- a completion -----------------------------------------------------------------------------


def test_a_completion_is_new_a_repeat_or_refused() -> None:
    t = Table()
    assert protocol.admit_completed_barrier(t, CLEAN, barrier=101, snapshot_id=11) is True
    assert protocol.admit_completed_barrier(t, CLEAN, barrier=101, snapshot_id=10) is True
    repeat = replace(CLEAN, existing=RecordedBarrier(10, False, None), snapshot_barrier=100,
                     expiration_approved=True)
    assert protocol.admit_completed_barrier(t, repeat, barrier=100, snapshot_id=10) is False
    other = refused(errors.BarrierRegressionError, protocol.admit_completed_barrier, t,
                    replace(CLEAN, existing=RecordedBarrier(9, False, None)), barrier=100,
                    snapshot_id=10)
    assert other.details["snapshot_id"] == 9
    refused(errors.SnapshotExpiredError, protocol.admit_completed_barrier, t,
            replace(CLEAN, expiration_approved=True), barrier=101, snapshot_id=10)
    older = refused(errors.BarrierRegressionError, protocol.admit_completed_barrier, t,
                    replace(CLEAN, snapshot_barrier=50), barrier=101, snapshot_id=9)
    assert older.details["recorded_barrier"] == 50
    assert protocol.admit_completed_barrier(Table(latest_barrier=None, latest_snapshot_id=None),
                                            CLEAN, barrier=1, snapshot_id=1) is True


# -- abort ------------------------------------------------------------------------------------


def test_abort_of_the_pinned_barrier_or_an_aborted_one() -> None:
    assert protocol.admit_abort("etl", Job(), 200, None) == "abort"
    assert protocol.admit_abort("etl", Job(pinned_barrier=None), 200, "aborted") == "already"
    assert protocol.admit_abort("etl", Job(pinned_barrier=None), 200, "invalidated") == "already"
    error = refused(errors.UnknownBarrierError, protocol.admit_abort, "etl", Job(), 150,
                    "committed")
    assert error.details == {"job": "etl", "barrier": 150, "pinned": 200}


# -- one rulebook, asserted on the wire -------------------------------------------------------


def _rulebook_codes() -> set[str]:
    tree = ast.parse((ROOT / "metaservice/core/protocol.py").read_text())
    names = {node.attr for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
             and node.value.id == "errors" and node.attr.endswith("Error")}
    return {getattr(errors, name).code for name in names}


def test_every_refusal_is_raised_by_the_rulebook_only() -> None:
    """No service raises a refusal of the barrier protocol itself: it asks the rulebook."""
    codes = _rulebook_codes()
    classes = {name for name in dir(errors)
               if isinstance(getattr(errors, name), type)
               and issubclass(getattr(errors, name), errors.MetaServiceError)
               and getattr(errors, name).code in codes
               and name not in ("InvalidRequestError", "UnknownJobError", "UnknownTableError",
                                "SnapshotExpiredError", "TableHasWriterError")}
    # Those five are raised elsewhere too, for requests outside the protocol (validation, job
    # and table lookups of the readers, a load of an expired snapshot, lease rules).
    for path in ("metaservice/barriers/service.py", "metaservice/jobs/service.py",
                 "metaservice/repositories/barriers.py"):
        text = (ROOT / path).read_text()
        raised = set(re.findall(r"raise errors\.(\w+Error)", text))
        assert not raised & classes, f"{path} raises {raised & classes} itself"


def _codes_asserted_on_the_wire(tree: ast.AST) -> set[str]:
    """The codes a test file asserts in answers: ``assert_error(response, status, "code")``, or
    ``…["code"] == "code"``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "assert_error"):
            found |= {a.value for a in node.args
                      if isinstance(a, ast.Constant) and isinstance(a.value, str)}
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Subscript)
                and isinstance(node.left.slice, ast.Constant) and node.left.slice.value == "code"):
            found |= {c.value for c in node.comparators
                      if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return found


def test_every_refusal_is_asserted_on_the_wire() -> None:
    """Each code the rulebook raises is asserted in an HTTP answer by some test."""
    asserted: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        if path.name != "test_rulebook.py":
            asserted |= _codes_asserted_on_the_wire(ast.parse(path.read_text()))
    missing = sorted(_rulebook_codes() - asserted)
    assert not missing, f"no wire test asserts {missing}"
