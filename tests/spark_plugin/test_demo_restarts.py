"""How ``metaservice-demo`` supervises its streaming queries: a query failed because a Python
worker did not connect back in Spark's 10 s (a passing cause on a busy machine) is restarted from
its checkpoint after a doubling pause, up to a number of failures in a row that a micro-batch run
clears; any other failure, or one too many in a row, ends the demo."""

from __future__ import annotations

from pathlib import Path

import pytest

from metaservice_demo import demo
from metaservice_demo.demo import ENRICH_JOB, Console, Jobs

TIMEOUT = ("org.apache.spark.SparkException: Python worker failed to connect back. "
           "java.net.SocketTimeoutException: Timed out while waiting for the Python worker")


class Run:
    """One run of a streaming query, as the demo sees it: its failure, if any, and whether it
    has made progress (``StreamingQuery.exception()`` and ``lastProgress``)."""

    def __init__(self, error: str | None, progressed: bool) -> None:
        self.error, self.name = error, ENRICH_JOB
        self.lastProgress = {"batchId": 0} if progressed else None

    def exception(self) -> str | None:
        return self.error


@pytest.fixture
def supervised(monkeypatch, tmp_path: Path):
    """Jobs whose enrichment query runs as the runs handed to ``runs`` say, one per start, and
    the pauses the supervisor took."""
    pauses: list[float] = []
    monkeypatch.setattr(demo.time, "sleep", pauses.append)
    jobs = Jobs(None, "http://unused", tmp_path, 1, 2, Console())
    runs: list[Run] = []

    def start() -> None:
        jobs.queries[ENRICH_JOB] = runs.pop(0)

    jobs._starts[ENRICH_JOB] = start
    return jobs, runs, pauses


def test_a_worker_timeout_is_restarted_with_doubling_pauses_and_a_micro_batch_clears_the_count(
        supervised, capsys):
    jobs, runs, pauses = supervised
    jobs.queries[ENRICH_JOB] = Run(TIMEOUT, progressed=False)
    runs += [Run(TIMEOUT, False), Run(TIMEOUT, False), Run(None, progressed=False)]
    for _ in range(3):
        jobs.check()
    assert pauses == [10, 20, 40]
    jobs.check()  # running, no micro-batch yet: the count stands
    assert jobs.restarts[ENRICH_JOB] == 3
    jobs.queries[ENRICH_JOB].lastProgress = {"batchId": 1}
    jobs.check()  # a micro-batch ran: a later timeout starts again from the shortest pause
    assert jobs.restarts[ENRICH_JOB] == 0
    jobs.queries[ENRICH_JOB] = Run(TIMEOUT, progressed=True)
    runs.append(Run(None, True))
    jobs.check()
    assert pauses == [10, 20, 40, 10]
    assert "restarting it from its checkpoint in 40 s (3 of 8 in a row)" in capsys.readouterr().out


def test_pauses_stop_growing_and_one_failure_too_many_in_a_row_ends_the_demo(supervised):
    jobs, runs, pauses = supervised
    jobs.queries[ENRICH_JOB] = Run(TIMEOUT, progressed=False)
    runs += [Run(TIMEOUT, False) for _ in range(Jobs.RESTARTS_IN_A_ROW)]
    for _ in range(Jobs.RESTARTS_IN_A_ROW):
        jobs.check()
    assert pauses == [10, 20, 40, 60, 60, 60, 60, 60]
    with pytest.raises(RuntimeError, match="failed to connect back"):
        jobs.check()


def test_any_other_failure_ends_the_demo_at_once(supervised):
    jobs, _, pauses = supervised
    jobs.queries[ENRICH_JOB] = Run("AnalysisException: [TABLE_OR_VIEW_NOT_FOUND]", True)
    with pytest.raises(RuntimeError, match=f"query {ENRICH_JOB} failed: AnalysisException"):
        jobs.check()
    assert pauses == []
