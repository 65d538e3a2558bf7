"""Purges of dropped tables, from a record written with the drop (``catalog_purges``), until
every file under the locations the table claimed is gone.

A drop with ``purgeRequested`` records the purge in its own transaction and keeps the table's
location claims (``catalog_locations``) while the purge is pending, so no table created or
registered meanwhile can claim a location being purged, nor the dropped table's uuid. The
process that answered the drop holds the record from that transaction on and purges it: up to
``METASERVICE_PURGE_ANSWER_SECONDS`` before it answers (a small table is gone by then, so a
create at its location right after the drop succeeds), the rest right after the answer. Each
server process's :class:`PurgeWorker` thread also takes, at start and every ``poll_seconds``,
any record whose holder's claim lapsed (a server killed mid-purge), and finishes it. The
record, and the claims, are deleted only once the purge finished.

A purge lists, page by page, the files under each claimed location (an ``s3://`` prefix through
``ListObjectsV2``, ``page_size`` at a time, deleted by one ``DeleteObjects`` per page; a local
directory walked) and deletes those that lie inside the claim and inside no location another
table or view claims now (none can, while the claims are held; the check is a second guard).
Each page first extends the worker's claim by a conditional UPDATE: a worker whose claim lapsed
and was taken by another stops before it deletes anything more, so two processes never purge
one record at once. Progress is the store itself: a purge taken again lists what is left.

Listing replaces the walk over the table's manifests that purges did before: every file a
manifest names under the claims is listed too, and a file a manifest names elsewhere was never
the table's to delete; the listing also finds what no metadata names any more (files of
failed commits, of expired snapshots, cut files), which a purge of the table should delete as
well, and needs no metadata file that can still be read. It also deletes what an earlier table,
dropped without purge, left at a location this table claimed after it (as a purge in Iceberg's
Hadoop catalog deletes the table's directory). A location the server cannot list
(a scheme other than a local path or ``s3://``) is logged and left.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid

from metaservice.catalog.storage.warehouse import Warehouse, inside
from metaservice.catalog.tables import repository as repo
from metaservice.catalog.tables.repository import PendingPurge
from metaservice.clock import Clock, SystemClock
from metaservice.db.session import Database

logger = logging.getLogger(__name__)

__all__ = ["PendingPurge", "PurgeWorker"]


class ClaimLost(Exception):
    """The worker's claim on a purge lapsed and another took it (or it finished)."""


class OutOfTime(Exception):
    """The time the purge was given ran out: it goes on elsewhere, still held."""


class Stopping(Exception):
    """The server is stopping: the purge is given back for another process to finish."""


class PurgeWorker:
    """The purges of one server process: the drops it answers (``purge``, called after the
    drop committed: for up to ``answer_seconds`` before its answer, the rest after it) and,
    in a daemon thread between ``start`` and ``stop``, those whose holder's claim lapsed
    (``run_once``)."""

    def __init__(self, database: Database, warehouse: Warehouse, *, clock: Clock | None = None,
                 page_size: int = 1000, claim_seconds: float = 60.0,
                 poll_seconds: float = 10.0, answer_seconds: float = 0.0,
                 name: str | None = None) -> None:
        if not 1 <= page_size <= 1000:
            raise ValueError("a purge's page holds 1 to 1000 files (one DeleteObjects)")
        self.database = database
        self.warehouse = warehouse
        self.clock = clock or SystemClock()
        self.page_size = page_size
        self.claim_ms = int(claim_seconds * 1000)
        self.poll_seconds = poll_seconds
        self.answer_seconds = answer_seconds
        self.name = name or f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one purge ---------------------------------------------------------------------------

    def purge(self, purge: PendingPurge, *, seconds: float | None = None) -> bool:
        """Delete the files of ``purge``, page by page, while this worker holds it; then delete
        its record and release its claims. Answers whether it finished here: False when the
        worker lost its claim, or a page failed (the store did not answer, a file was not
        deleted): the record stays, and the purge is taken again once the claim lapses; or the
        server is stopping (``stop``): the claim is given back at once; or ``seconds`` ran out
        (the drop's answer waits that long at most): the worker still holds it."""
        deadline = None if seconds is None else time.monotonic() + seconds
        try:
            for claim in purge.claims:
                self._purge_claim(purge, claim, deadline)
            with self.database.transaction(write=True) as session:
                if not repo.finish_purge(session, purge.table_uuid, worker=self.name):
                    raise ClaimLost
        except ClaimLost:
            logger.warning("purge_claim_lost", extra={"table_uuid": purge.table_uuid,
                                                      "worker": self.name})
            return False
        except OutOfTime:
            return False
        except Stopping:
            try:
                with self.database.transaction(write=True) as session:
                    repo.release_purge(session, purge.table_uuid, worker=self.name)
            except Exception:  # noqa: BLE001 - then its claim lapses
                logger.warning("purge_not_given_back", extra={"table_uuid": purge.table_uuid})
            logger.info("purge_given_back", extra={"table_uuid": purge.table_uuid})
            return False
        except Exception:  # noqa: BLE001 - the store or the database: taken again later
            logger.warning("purge_interrupted", extra={"table_uuid": purge.table_uuid},
                           exc_info=True)
            return False
        self.warehouse.forget(purge.metadata_location)
        logger.info("catalog_table_purged", extra={"table_uuid": purge.table_uuid})
        return True

    def _purge_claim(self, purge: PendingPurge, claim: str, deadline: float | None) -> None:
        after: str | None = None
        failed = False
        while True:
            if self._stop.is_set():
                raise Stopping
            if deadline is not None and time.monotonic() > deadline:
                raise OutOfTime
            page = self.warehouse.list_claimed(claim, after=after, limit=self.page_size)
            if not page:
                break
            after = page[-1]
            others = self._hold(purge.table_uuid, claim)
            doomed = []
            for location in page:
                key = _key_of(location)
                if not inside(key, claim):
                    logger.warning("purge_skipped_foreign_file",
                                   extra={"location": location[:300]})
                elif any(inside(key, other) for other in others):
                    logger.warning("purge_skipped_claimed_file",
                                   extra={"location": location[:300]})
                else:
                    doomed.append(location)
            failed = bool(self.warehouse.delete_files(doomed)) or failed
        if failed:
            raise OSError(f"files under {claim[:300]} were not deleted")

    def _hold(self, table_uuid: str, claim: str) -> list[str]:
        """Extend this worker's claim on the purge (before each page's deletion), and answer
        the locations other tables or views claim inside, or over, ``claim``.

        Raises:
            ClaimLost: another worker holds the purge now, or it is finished.
        """
        with self.database.transaction(write=True) as session:
            if not repo.extend_purge_claim(session, table_uuid, worker=self.name,
                                           until_ms=self.clock.now_ms() + self.claim_ms):
                raise ClaimLost
            return [location for location, _ in
                    repo.claims_overlapping(session, claim, table_uuid)]

    # -- purges whose holder is gone -----------------------------------------------------------

    def run_once(self) -> int:
        """Take purges whose claim lapsed, one at a time, and purge them; answers how many
        finished."""
        finished = 0
        while not self._stop.is_set():
            with self.database.transaction(write=True) as session:
                taken = repo.take_lapsed_purge(session, worker=self.name,
                                               now_ms=self.clock.now_ms(),
                                               claim_ms=self.claim_ms)
            if taken is None:
                break
            logger.info("purge_resumed", extra={"table_uuid": taken.table_uuid,
                                                "worker": self.name})
            if not self.purge(taken):
                break  # the store or the database is away: the next cycle tries again
            finished += 1
        return finished

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - the database may be away for a while
                logger.warning("purge_cycle_failed", exc_info=True)
            self._stop.wait(self.poll_seconds)

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="catalog-purges",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


def _key_of(location: str) -> str:
    """A listed file's location as claims are compared: a local path as it is (the walk never
    leaves the claimed directory through a link), an object's with its scheme as claims have it."""
    if location.startswith("/"):
        return "file://" + location
    return location
