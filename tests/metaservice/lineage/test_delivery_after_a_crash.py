"""A server killed (SIGKILL) between its commits and their delivery loses no OpenLineage event:
restarted, it delivers them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from benchmarks._environment import free_port
from metaservice.db.session import Database
from metaservice.repositories import lineage as outbox_repo
from tests.metaservice.lineage.openlineage_checks import Receiver
from tests.metaservice.lineage.test_openlineage_events import EXPECTED, run_pipeline, shape

pytestmark = pytest.mark.slow  # a server process, killed and restarted


@contextmanager
def serve(database_url: str, openlineage_url: str, port: int) -> Iterator[subprocess.Popen[Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENLINEAGE")}
    env.update({"METASERVICE_DATABASE_URL": database_url, "METASERVICE_LOG_LEVEL": "warning",
                "OPENLINEAGE_URL": openlineage_url, "METASERVICE_LINEAGE_CLAIM_SECONDS": "2",
                "METASERVICE_LINEAGE_MAX_BACKOFF_SECONDS": "1"})
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "metaservice", "serve", "--no-migrate", "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise AssertionError(f"the server did not start: {log.read()[-800:]!r}")
                time.sleep(0.1)
            yield process
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=20)


def outbox(database: Database) -> int:
    with database.transaction(write=False) as session:
        return outbox_repo.standing(session).pending


def test_every_event_is_delivered_after_a_kill(database: Database, database_url: str) -> None:
    receiver_port = free_port()
    port = free_port()
    with serve(database_url, f"http://127.0.0.1:{receiver_port}", port) as process:
        # The receiver is down: every commit is acknowledged, every event waits.
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            run_pipeline(http)
        written = outbox(database)
        assert written == sum(len(events) for events in EXPECTED.values())
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    assert outbox(database) == written  # nothing was delivered, nothing was lost
    with Receiver(receiver_port) as receiver, \
            serve(database_url, receiver.url, port):
        deadline = time.monotonic() + 60
        while outbox(database) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert outbox(database) == 0
    jobs: dict[str, list[tuple[str, int, int]]] = {}
    for event in receiver.events:
        jobs.setdefault(event["job"]["name"], []).append(shape(event))
    assert jobs == EXPECTED  # each job's events, in order, once
