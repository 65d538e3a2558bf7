"""Delivery of the outbox's OpenLineage events through the ``openlineage-python`` client.

The client is configured as OpenLineage users configure it: ``OPENLINEAGE_URL`` (with
``OPENLINEAGE_API_KEY``, ``OPENLINEAGE_ENDPOINT``), ``OPENLINEAGE__TRANSPORT__*`` variables, or
an ``openlineage.yml`` (``OPENLINEAGE_CONFIG``, the working directory, ``~/.openlineage``); any
transport the client has (http, file, kafka, console, composite …) delivers.
``OPENLINEAGE_DISABLED=true``, or none of these, means no OpenLineage at all: the server writes
no events. Jobs are in the namespace ``OPENLINEAGE_NAMESPACE`` (default ``metaservice``).

One :class:`OutboxSender` thread runs in each server process. A cycle claims a few jobs and
their oldest events (``repository.claim``: one sender at a time per job, so a job's events go
out in order whichever process claims them), emits them one by one, then deletes those
delivered and gives the jobs back (what it could not send before its claim is four-fifths
through waits for the next cycle). An event that fails stays, with its job's later ones, and
the job is tried again after a backoff (1 s, doubling, at most ``max_backoff_seconds``); a
receiver that is down delays delivery and nothing else. A crash
between delivery and deletion delivers the event again (at least once): a redelivered event
is the same JSON, with the same run id.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metaservice import __version__
from metaservice import openlineage as ol
from metaservice.clock import Clock, SystemClock
from metaservice.db.session import Database
from metaservice.repositories import lineage as outbox_repo
from metaservice.settings import Settings

logger = logging.getLogger(__name__)

DEFAULT_JOB_NAMESPACE = "metaservice"


def configured_in_environment(environ: dict[str, str] | None = None) -> bool:
    """Whether OpenLineage is configured here the way its client reads a configuration (and
    not disabled)."""
    env = os.environ if environ is None else environ
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OPENLINEAGE_URL") or any(k.startswith("OPENLINEAGE__TRANSPORT__") for k in env):
        return True
    candidates = [env.get("OPENLINEAGE_CONFIG"), os.path.join(os.getcwd(), "openlineage.yml"),
                  os.path.expanduser("~/.openlineage/openlineage.yml")]
    return any(path and os.path.isfile(path) for path in candidates)


def client_from_environment() -> Any | None:
    """The ``OpenLineageClient`` configured by the environment, or None when OpenLineage is not
    configured, disabled, or configured without a transport (where the client would print to
    the console by default)."""
    if not configured_in_environment():
        return None
    try:
        from openlineage.client import OpenLineageClient
    except ModuleNotFoundError as exc:
        raise RuntimeError(f"OpenLineage is configured but its client is missing ({exc.name}): "
                           "pip install 'metaservice[server]'") from None
    has_url = bool(os.environ.get("OPENLINEAGE_URL"))
    client = OpenLineageClient()
    if client.transport.kind == "noop":
        return None
    if not has_url and not (client.config.transport or {}).get("type"):
        return None
    return client


def naming_from(settings: Settings) -> ol.Naming:
    """Event naming for this deployment (job namespace, catalog URI, producer)."""
    public = (settings.public_url or f"http://{settings.host}:{settings.port}").rstrip("/")
    warehouse = settings.warehouse
    if "://" not in warehouse:
        warehouse = Path(warehouse).resolve().as_uri()
    return ol.Naming(
        job_namespace=os.environ.get("OPENLINEAGE_NAMESPACE") or DEFAULT_JOB_NAMESPACE,
        catalog_name=settings.catalog_name,
        catalog_uri=f"{public}/iceberg",
        warehouse_uri=warehouse,
        producer=f"urn:metaservice:{__version__}",
        barrier_facet_schema_url=(f"{public}{ol.BARRIER_FACET_PATH}"
                                  "#/$defs/MetaServiceBarrierRunFacet"),
    )


def client_event(data: dict[str, Any]) -> Any:
    """An outbox event (its JSON object) as the client's ``RunEvent``, for ``client.emit``; the
    facets stay the JSON objects they were written as."""
    from openlineage.client.event_v2 import (
        InputDataset,
        Job,
        OutputDataset,
        Run,
        RunEvent,
        RunState,
    )

    return RunEvent(
        eventType=RunState(data["eventType"]), eventTime=data["eventTime"],
        producer=data["producer"],
        run=Run(runId=data["run"]["runId"], facets=data["run"].get("facets", {})),
        job=Job(namespace=data["job"]["namespace"], name=data["job"]["name"],
                facets=data["job"].get("facets", {})),
        inputs=[InputDataset(namespace=d["namespace"], name=d["name"],
                             facets=d.get("facets", {}), inputFacets=d.get("inputFacets", {}))
                for d in data.get("inputs", [])],
        outputs=[OutputDataset(namespace=d["namespace"], name=d["name"],
                               facets=d.get("facets", {}), outputFacets=d.get("outputFacets", {}))
                 for d in data.get("outputs", [])],
    )


@dataclass
class SenderCounts:
    """What one sender did; the app's metrics read these (``observability/metrics.py``)."""

    sent: int = 0
    failed: int = 0


class OutboxSender:
    """The background sender of one process. ``run_once`` is one cycle (tests and benchmarks
    call it directly); ``start`` runs cycles in a daemon thread until ``stop``."""

    def __init__(self, database: Database, emit: Callable[[Any], None], *,
                 clock: Clock | None = None, poll_seconds: float = 0.5,
                 claim_seconds: float = 60.0, jobs_per_cycle: int = 50,
                 events_per_job: int = 100, max_backoff_seconds: float = 60.0,
                 duty: float = 0.5, name: str | None = None) -> None:
        self.database = database
        self.emit = emit
        self.clock = clock or SystemClock()
        self.poll_seconds = poll_seconds
        self.claim_ms = int(claim_seconds * 1000)
        self.jobs_per_cycle = jobs_per_cycle
        self.events_per_job = events_per_job
        self.max_backoff_ms = int(max_backoff_seconds * 1000)
        self.duty = duty
        self.name = name or f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.counts = SenderCounts()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def with_client(cls, database: Database, client: Any, **kwargs: Any) -> OutboxSender:
        """A sender emitting through an ``OpenLineageClient``."""
        return cls(database, lambda event: client.emit(client_event(event)), **kwargs)

    def run_once(self) -> int:
        """Claim, deliver, record; returns how many events were delivered."""
        now = self.clock.now_ms()
        with self.database.transaction(write=True) as session:
            claimed = outbox_repo.claim(session, sender=self.name, now_ms=now,
                                        claim_ms=self.claim_ms, jobs=self.jobs_per_cycle,
                                        per_job=self.events_per_job)
        if not claimed:
            return 0
        delivered: list[int] = []
        failures: dict[str, tuple[str, int]] = {}
        # Stop well before the claim lapses: past it, another sender may take these jobs.
        deadline = now + self.claim_ms * 8 // 10
        for event in claimed:
            if (event.job in failures or self._stop.is_set()
                    or self.clock.now_ms() > deadline):
                continue  # after a failure its job waits, in order
            started = time.perf_counter()
            try:
                self.emit(json.loads(event.payload))
            except Exception as exc:  # noqa: BLE001 - any transport error: retried later
                backoff = min(self.max_backoff_ms, 1000 * 2 ** min(event.attempts, 20))
                failures[event.job] = (f"{type(exc).__name__}: {exc}",
                                       self.clock.now_ms() + backoff)
                self.counts.failed += 1
                logger.warning("lineage_delivery_failed",
                               extra={"job": event.job, "event_id": event.id,
                                      "attempts": event.attempts + 1, "error": str(exc)[:200]})
                continue
            delivered.append(event.id)
            self.counts.sent += 1
            self._pace(time.perf_counter() - started)
        with self.database.transaction(write=True) as session:
            outbox_repo.delete_delivered(session, delivered)
            outbox_repo.release(session, {e.job for e in claimed} - set(failures), self.name)
            for job, (error, retry_at) in failures.items():
                outbox_repo.record_failure(session, job, self.name, error=error,
                                           retry_at_ms=retry_at)
        return len(delivered)

    def _pace(self, busy: float) -> None:
        """Rest as long as the delivery took, times ``(1 - duty) / duty``: the client's work
        (serialising, HTTP) holds the interpreter lock, and a thread that never rests makes
        each request of the server wait for it."""
        if self.duty < 1:
            self._stop.wait(busy * (1 - self.duty) / self.duty)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                delivered = self.run_once()
            except Exception:  # noqa: BLE001 - the database may be away for a while
                logger.warning("lineage_sender_cycle_failed", exc_info=True)
                delivered = 0
            if delivered == 0:
                self._stop.wait(self.poll_seconds)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="lineage-sender",
                                            daemon=True)
            self._thread.start()
            logger.info("lineage_sender_started", extra={"sender": self.name})

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
