"""Every acknowledged write survives a crash (docs/contract.md#durable-and-race-free-writes), on
both backends.

The real server runs as its own process (``python -m metaservice serve``). A pipeline writes to
it — root reports, a job's next and commit — while another client reports a second root; right
after an acknowledged response the server is killed with SIGKILL, mid-flight for the other
client. It is started again on the same database, and every write it acknowledged must be
there; the job then carries on from where the database says it is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks._environment import free_port

pytestmark = pytest.mark.slow  # servers run as processes and are killed

CRASHES = 3


class ServerProcess:
    """``metaservice serve`` in a child process, on loopback."""

    def __init__(self, database_url: str, log: Path,
                 env: dict[str, str] | None = None) -> None:
        self.database_url = database_url
        self.log = log
        self.env = env or {}
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("METASERVICE_")}
        env.update(METASERVICE_DATABASE_URL=self.database_url, METASERVICE_LOG_LEVEL="warning")
        env.update(self.env)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "metaservice", "serve", "--port", str(self.port)],
                env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the server did not become ready:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, nothing is flushed that was not already."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


@pytest.fixture
def server_database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'metaservice.db'}"  # created and migrated by `serve`
    request.getfixturevalue("database")  # the session's PostgreSQL schema, migrated and wiped
    return request.getfixturevalue("database_url")


@pytest.fixture
def server(server_database_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(server_database_url, tmp_path / "server.log")
    server.start()
    yield server
    server.kill()


class Acknowledged:
    """Writes the server answered 200 to: ``(table, barrier, snapshot)``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writes: set[tuple[str, int, int]] = set()

    def note(self, response: httpx.Response) -> None:
        assert response.status_code == 200, response.text
        body = response.json()
        with self.lock:
            self.writes.add((body["table"], body["barrier"], body["snapshot_id"]))


class _Enough(Exception):
    pass


def pipeline_steps(http: httpx.Client, acked: Acknowledged, count: int) -> None:
    """Root ``src`` at a new barrier, the job's next, its commit to ``out``, … until ``count``
    responses were acknowledged; returns right after the last one. Every snapshot id is a
    function of its barrier, so a step repeated after a crash is an exact repeat."""
    left = count

    def acknowledged(response: httpx.Response) -> None:
        nonlocal left
        acked.note(response)
        left -= 1
        if left == 0:
            raise _Enough

    try:
        while True:
            latest = http.get("/tables/lake/db/src/barriers", params={"limit": 1}).json()
            barrier = latest["latest_barrier"] + 10
            acknowledged(http.post("/tables/lake/db/src/barriers",
                                   json={"barrier": barrier, "snapshot_id": 7 * barrier}))
            position = http.post("/jobs/etl/barriers/next", json={}).json()
            while position["action"] == "process":
                b = position["barrier"]
                acknowledged(http.post("/commit/etl/lake/db/out",
                                       json={"barrier": b, "snapshot_id": 11 * b}))
                position = http.post("/jobs/etl/barriers/next", json={}).json()
    except _Enough:
        return


def other_root(http: httpx.Client, acked: Acknowledged, stop: threading.Event) -> None:
    """Another ingestion client, with assigned barriers, often in flight when the kill comes."""
    snapshot = int(time.time() * 1000)
    while not stop.is_set():
        snapshot += 1
        try:
            response = http.post("/tables/lake/db/other/barriers", json={"snapshot_id": snapshot})
        except httpx.TransportError:
            return  # the server is gone: this request's outcome is unknown, and that is fine
        acked.note(response)


def recorded(http: httpx.Client, table: str) -> set[tuple[str, int, int]]:
    rows: set[tuple[str, int, int]] = set()
    before = None
    while True:
        params = {"limit": 1000} | ({"before": before} if before is not None else {})
        page = http.get(f"/tables/{table.replace('.', '/')}/barriers", params=params).json()
        rows |= {(table, b["barrier"], b["snapshot_id"]) for b in page["barriers"]}
        if len(page["barriers"]) < 1000:
            return rows
        before = page["barriers"][-1]["barrier"]


def test_acknowledged_writes_survive_sigkill(server: ServerProcess) -> None:
    acked = Acknowledged()
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for role, table in (("source", "src"), ("sink", "out")):
            assert http.post(f"/register/{role}/etl/lake/db/{table}").status_code == 200
        acked.note(http.post("/tables/lake/db/src/barriers",
                             json={"barrier": 10, "snapshot_id": 70}))
        start = http.post("/jobs/etl/start").json()
        assert start["barrier"] == 10
        acked.note(http.post("/commit/etl/lake/db/out", json={"barrier": 10, "snapshot_id": 110}))

    for crash in range(CRASHES):
        stop = threading.Event()
        with httpx.Client(base_url=server.url, timeout=30) as steps, \
                httpx.Client(base_url=server.url, timeout=30) as other:
            background = threading.Thread(target=other_root, args=(other, acked, stop))
            background.start()
            pipeline_steps(steps, acked, count=7 + 5 * crash)
            server.kill()  # right after the last acknowledged response
            stop.set()
            background.join(timeout=60)

        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as http:
            found = set().union(*(recorded(http, t)
                                  for t in ("lake.db.src", "lake.db.out", "lake.db.other")))
            lost = acked.writes - found
            assert not lost, f"acknowledged but lost after crash {crash}: {sorted(lost)}"
            job = http.get("/jobs/etl").json()
            assert job["state"] == "running"
            committed = max(b for t, b, _ in acked.writes if t == "lake.db.out")
            assert job["last_committed_barrier"] >= committed
            out = http.get("/version/weak/lake/db/out").json()
            assert out["barrier"] == job["last_committed_barrier"]

    # After the crashes the pipeline still runs to the end: the job catches up with its source.
    with httpx.Client(base_url=server.url, timeout=30) as http:
        source = http.get("/version/weak/lake/db/src").json()["barrier"]
        for _ in range(10):
            position = http.post("/jobs/etl/barriers/next", json={}).json()
            if position["action"] != "process":
                break
            b = position["barrier"]
            acked.note(http.post("/commit/etl/lake/db/out",
                                 json={"barrier": b, "snapshot_id": 11 * b}))
        assert http.get("/version/strong/lake/db/out").json()["barrier"] == source
        found = recorded(http, "lake.db.out")
        assert {w for w in acked.writes if w[0] == "lake.db.out"} <= found
