"""Group commit of root reports: the reports that arrive together share one transaction and
one commit (one fsync).

Each server process has one committer thread. A request hands its report over and waits, on
the event loop, for its own answer; the thread takes every report waiting at that moment, records
them in one transaction (``barriers.service.report_roots_together``: the tables found and
locked in one statement, in id order) and answers each only once that transaction has
committed, so every acknowledged report is durable. The groups are committed on one
connection the thread holds while reports keep coming (no pool checkout and liveness check per
group; after a failed group it takes a new one). While it commits, the next reports gather:
the busier the server, the larger the groups, and a report arriving alone is recorded alone,
with no wait for company.

A refused report (409 and the like) is refused before it writes anything, so its neighbours
are recorded as if it had not been sent. A report that must take other locks first (its table
is new, or is catching up) is recorded in a transaction of its own after the group; so is
every report of a group whose transaction failed as a whole (a lost connection, a database
error), each then answered by its own outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence

from sqlalchemy import Connection

from metaservice import errors
from metaservice.barriers import service
from metaservice.barriers.service import Completed, RootReport
from metaservice.context import ServiceContext
from metaservice.db.session import Database
from metaservice.names import TableName

logger = logging.getLogger(__name__)

Outcome = Completed | BaseException

# Reports recorded in one transaction at most: a group holds its tables' locks until it
# commits, so an unbounded one would keep a table another process waits for locked too long.
MAX_GROUP = 64
# The connection the groups are committed on is held this long after a group while no report
# waits, then given back to the pool.
HOLD_SECONDS = 0.05
# The thread ends after this long without a report (an app that stops reporting, or is never
# shut down, such as one of many in a test process, keeps no thread).
IDLE_SECONDS = 5.0


class _Waiting:
    """A report handed over, and where its answer goes."""

    __slots__ = ("report", "loop", "answer")

    def __init__(self, report: RootReport, loop: asyncio.AbstractEventLoop,
                 answer: asyncio.Future[Completed]) -> None:
        self.report, self.loop, self.answer = report, loop, answer


def _settle(answer: asyncio.Future[Completed], outcome: Outcome) -> None:
    if answer.done():  # the request went away (its client disconnected)
        return
    if isinstance(outcome, BaseException):
        answer.set_exception(outcome)
    else:
        answer.set_result(outcome)


def _settle_all(settled: list[tuple[asyncio.Future[Completed], Outcome]]) -> None:
    for answer, outcome in settled:
        _settle(answer, outcome)


class RootReportCommitter:
    """The committer of one server process (``app.state.root_reports``)."""

    def __init__(self, database: Database, ctx: ServiceContext, *,
                 max_group: int = MAX_GROUP) -> None:
        self._database, self._ctx, self._max_group = database, ctx, max_group
        self._waiting: list[_Waiting] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        # The connection the groups are committed on, held while reports keep coming: no pool
        # checkout (and liveness round trip) per group. Only the thread uses it (and stop(),
        # once the thread has ended).
        self._connection: Connection | None = None

    async def report(self, name: TableName, *, snapshot_id: int,
                     barrier: int | None) -> Completed:
        """Record a root report (``service.report_root``'s rules) with the reports arriving
        with it; its answer once its transaction has committed, or its refusal."""
        report = RootReport(name, snapshot_id, barrier)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Completed] = loop.create_future()
        with self._wake:
            handed_over = not self._stopping
            if handed_over:
                self._waiting.append(_Waiting(report, loop, answer))
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="root-report-committer", daemon=True)
                    self._thread.start()
                self._wake.notify()
        if handed_over:
            return await answer
        # The thread has ended (the server is stopping): a transaction of its own.
        outcome = await asyncio.to_thread(self._alone, report)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def stop(self) -> None:
        """Record what was handed over, then end the thread."""
        with self._wake:
            self._stopping = True
            thread = self._thread
            self._wake.notify()
        if thread is not None:
            thread.join()
        self._release_connection()

    def _run(self) -> None:
        while True:
            group = self._next_group()
            if group is None:  # stopping, or idle (the connection given back): the next
                return         # report starts a thread
            try:
                outcomes = self._commit_group([w.report for w in group], held=True)
            except Exception as failed:  # a bug: the group is answered, the thread goes on
                logger.exception("root_report_group_unanswerable")
                outcomes = [failed] * len(group)
            # One wake-up of each event loop for all its answers (one per answer was a write to
            # the loop's self-pipe each).
            answers: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Completed],
                                                                Outcome]]] = {}
            for waiting, outcome in zip(group, outcomes, strict=True):
                answers.setdefault(waiting.loop, []).append((waiting.answer, outcome))
            for loop, settled in answers.items():
                # RuntimeError: its event loop is closed, nobody waits for the answers.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_settle_all, settled)

    def _next_group(self) -> list[_Waiting] | None:
        """The reports waiting, as many as a group takes, once there are any; None when the
        thread should end. It waits with the connection held a short while (under load the
        next reports are that close), then gives it back to the pool and waits on."""
        with self._wake:
            if self._connection is not None and not self._waiting and not self._stopping:
                self._wake.wait(HOLD_SECONDS)
            if self._waiting or self._connection is None:
                return self._take_group()
        self._release_connection()
        with self._wake:
            return self._take_group()

    def _take_group(self) -> list[_Waiting] | None:
        """The reports to commit next, waiting up to ``IDLE_SECONDS`` for one; None when the
        thread should end. Called with ``self._wake`` held."""
        if not self._waiting and not self._stopping:
            self._wake.wait(IDLE_SECONDS)
        if not self._waiting:
            self._thread = None
            return None
        group = self._waiting[:self._max_group]
        del self._waiting[:self._max_group]
        return group

    def commit_group(self, reports: Sequence[RootReport]) -> list[Outcome]:
        """Record ``reports`` together, on a connection of the pool; each one's answer or
        refusal, in their order."""
        return self._commit_group(reports, held=False)

    def _commit_group(self, reports: Sequence[RootReport], *, held: bool) -> list[Outcome]:
        """:meth:`commit_group`; with ``held`` (the committer thread alone) on the connection
        the thread holds."""
        # A report alone is a group of one too: the group's statements are fewer than
        # ``report_root``'s.
        together: list[Completed | errors.MetaServiceError | None]
        try:
            if not held:
                transaction = self._database.transaction(write=True)
            else:
                if self._connection is None:  # no connection to be had: each on its own below
                    self._connection = self._database.held_connection()
                transaction = self._database.transaction_on(self._connection)
            with transaction as session:
                together = service.report_roots_together(session, self._ctx, reports)
        except Exception:
            logger.warning("root_report_group_failed", exc_info=True,
                           extra={"reports": len(reports)})
            # Rolled back: each on its own below, on a connection of the pool (checked as it
            # is taken). The group's, perhaps lost, is not used again.
            if held:
                self._release_connection()
            together = [None] * len(reports)
        return [self._alone(report) if outcome is None else outcome
                for report, outcome in zip(reports, together, strict=True)]

    def _release_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):  # a lost connection may fail to close
                connection.close()

    def _alone(self, report: RootReport) -> Outcome:
        try:
            with self._database.transaction(write=True) as session:
                return service.report_root(session, self._ctx, report.name,
                                           snapshot_id=report.snapshot_id,
                                           barrier=report.barrier)
        except Exception as failed:  # the request raises it, as the endpoint would have
            return failed
