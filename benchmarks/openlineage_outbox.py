"""Commit latency with OpenLineage's sender running, and with its receiver down, next to none.

Three ``metaservice serve`` processes, each on a fresh database, run side by side; one
keep-alive connection reports root snapshots (``POST /tables/lake/ingest/t/barriers``, the
latest snapshot again at a barrier the service assigns: every answer is a durable commit, and
with OpenLineage configured an event written to the outbox in its transaction) one after the
other, for the same time:

- **none**: OpenLineage not configured (the baseline: nothing written, no sender);
- **delivering**: ``OPENLINEAGE_URL`` names a receiver that takes every event (an HTTP server
  thread of this process answering 201); the sender delivers while the commits go on;
- **receiver down**: ``OPENLINEAGE_URL`` names a port nothing listens on, for the whole series
  (three minutes in full runs): every delivery fails, the events wait, the sender retries;
- **sender in its own process**: as *delivering*, with ``METASERVICE_LINEAGE_SENDER=none`` on
  the server and ``metaservice lineage-send`` delivering its outbox from a process of its own.

The series take turns, a few seconds each, round after round, so that other work on a shared
machine weighs on the three alike.

Goal: the commit latency does not depend on the receiver: p50 and p99 of each series within
25 % of the baseline's. The notes give the events delivered or waiting at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from benchmarks import _environment as environment
from benchmarks._report import Result, percentile

PATH = "/tables/lake/ingest/t/barriers"
BODY = b'{"snapshot_id": 1}'


@contextmanager
def receiver() -> Iterator[tuple[str, list[int]]]:
    """An OpenLineage HTTP endpoint taking every event; yields its URL and a one-item counter."""
    received = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length", 0)))
            received[0] += 1
            self.send_response(201)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def sender_process(database_url: str, openlineage_url: str) -> Iterator[None]:
    """``metaservice lineage-send`` delivering the outbox of ``database_url``, until the end."""
    env = {**os.environ, "OPENLINEAGE_URL": openlineage_url,
           "METASERVICE_LOG_LEVEL": "warning"}
    process = subprocess.Popen(
        [sys.executable, "-m", "metaservice", "--database-url", database_url, "lineage-send"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def pending(database_url: str) -> int:
    from metaservice.db.engine import build_engine
    from metaservice.db.session import Database
    from metaservice.repositories import lineage as repository

    database = Database(build_engine(database_url))
    try:
        with database.transaction(write=False) as session:
            return repository.standing(session).pending
    finally:
        database.dispose()


def run_backend(label: str, make_database, seconds: float,  # type: ignore[no-untyped-def]
                rounds: int) -> list[Result]:
    """The three servers run side by side the whole time; the series take turns, round after
    round, so that the load of a shared machine falls on all three alike."""
    closed = environment.free_port()
    samples: dict[str, list[float]] = {"none": [], "live": [], "down": [], "apart": []}
    with ExitStack() as stack:
        live_url, received = stack.enter_context(receiver())
        apart_url, received_apart = stack.enter_context(receiver())
        urls = {name: stack.enter_context(make_database(f"ol_{name}")) for name in samples}
        envs = {"none": {"OPENLINEAGE_DISABLED": "true"},
                "live": {"OPENLINEAGE_URL": live_url},
                "down": {"OPENLINEAGE_URL": f"http://127.0.0.1:{closed}"},
                "apart": {"OPENLINEAGE_URL": apart_url, "METASERVICE_LINEAGE_SENDER": "none"}}
        servers = {name: stack.enter_context(
            environment.server_processes(urls[name], extra_env=envs[name]))[0]
            for name in samples}
        stack.enter_context(sender_process(urls["apart"], apart_url))
        started = time.monotonic()
        for _ in range(rounds):
            for name, server in servers.items():
                latencies, _cpu = server.sequential(PATH, seconds, method="POST", body=BODY)
                samples[name] += latencies
        down_for = time.monotonic() - started
        time.sleep(2)  # the live senders catch up
        left = {name: pending(urls[name]) for name in ("live", "down", "apart")}
    results = []
    baseline = samples["none"]
    for name, title, note in (
        ("live", "sender delivering",
         f"{received[0]} events received, {left['live']} waiting 2 s after the last series"),
        ("down", "receiver down",
         f"receiver down for the whole run ({down_for:.0f} s): {left['down']} events waiting, "
         "none lost"),
        ("apart", "sender in its own process",
         f"{received_apart[0]} events received, {left['apart']} waiting 2 s after the last "
         "series"),
    ):
        for p in (50, 99):
            results.append(Result.compare(
                f"root report p{p}, {title} ({label})", percentile(samples[name], p), "ms",
                baseline="no OpenLineage", baseline_value=percentile(baseline, p),
                higher_is_better=False, at_least=0.8,
                goal="at most 1.25× the latency without OpenLineage",
                notes=f"{len(samples[name])} commits vs {len(baseline)} in {rounds} rounds "
                      f"of {seconds:.0f} s; {note}"))
    return results


def run(quick: bool) -> list[Result]:
    seconds, rounds = (3.0, 2) if quick else (10.0, 6)
    results = run_backend("PostgreSQL", environment.postgres_schema, seconds, rounds) \
        if environment.postgres_reachable() else []
    results += run_backend("SQLite", environment.sqlite_file, seconds, rounds)
    return results
