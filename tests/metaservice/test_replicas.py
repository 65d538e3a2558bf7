"""Two server processes on one database under 64 concurrent clients (bounded).

Clients register and start jobs, report root barriers, step jobs through next/commit and ask
for versions, spread over both processes. Afterwards: no 5xx, every acknowledged commit is
stored, no table has two running writers, and per table the stored barriers and latest(T) agree.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from sqlalchemy import text

from benchmarks._environment import free_port
from metaservice.db.session import Database

pytestmark = pytest.mark.slow  # two server processes

CLIENTS = 64
ROOTS = 4
STEPS_PER_CLIENT = 12


@contextmanager
def server_processes(database_url: str, count: int = 2,
                     env: dict[str, str] | None = None) -> Iterator[list[str]]:
    """``count`` ``metaservice serve`` processes on one database, ready; their URLs."""
    processes, urls = [], []
    env = {**os.environ, "METASERVICE_DATABASE_URL": database_url, **(env or {})}
    try:
        for _ in range(count):
            port = free_port()
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "metaservice", "serve", "--port", str(port)],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            urls.append(f"http://127.0.0.1:{port}")
        for url, process in zip(urls, processes, strict=True):
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert process.poll() is None, "server exited"
                assert time.monotonic() < deadline, "server did not become ready"
                time.sleep(0.1)
        yield urls
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=20)


@pytest.fixture
def two_servers(database: Database, database_url: str) -> Iterator[list[str]]:
    with server_processes(database_url) as urls:
        yield urls


def test_two_processes_keep_every_invariant(two_servers: list[str], database: Database) -> None:
    acknowledged: list[tuple[str, int, int]] = []  # (table, barrier, snapshot)
    server_errors: list[str] = []
    lock = threading.Lock()
    start_gate = threading.Barrier(CLIENTS)

    def client(index: int) -> None:
        rng = random.Random(index)
        url = two_servers[index % 2]
        job = f"job{index}"
        source = f"lake/db/root{index % ROOTS}"
        sink = f"lake/db/out{index % (CLIENTS // 2)}"  # two jobs plan each sink: one may run
        with httpx.Client(base_url=url, timeout=60) as http:

            def call(method: str, path: str, **kw) -> httpx.Response:  # type: ignore[no-untyped-def]
                response = http.request(method, path, **kw)
                if response.status_code >= 500:
                    with lock:
                        server_errors.append(f"{method} {path} -> {response.status_code} "
                                             f"{response.text[:200]}")
                return response

            start_gate.wait()
            call("POST", f"/register/source/{job}/{source}")
            call("POST", f"/register/sink/{job}/{sink}")
            started = call("POST", f"/jobs/{job}/start").status_code == 200
            after = None
            for step in range(STEPS_PER_CLIENT):
                action = rng.random()
                if action < 0.35:
                    r = call("POST", f"/tables/{source}/barriers",
                             json={"snapshot_id": index * 1000 + step})
                    if r.status_code == 200:
                        body = r.json()
                        with lock:
                            acknowledged.append((body["table"], body["barrier"],
                                                 body["snapshot_id"]))
                elif action < 0.75 and started:
                    r = call("POST", f"/jobs/{job}/barriers/next", json={"after": after})
                    body = r.json()
                    if r.status_code == 200 and body["action"] == "process":
                        snapshot = 10_000_000 + index * 1000 + step
                        c = call("POST", f"/commit/{job}/{sink}",
                                 json={"barrier": body["barrier"], "snapshot_id": snapshot})
                        if c.status_code == 200:
                            after = body["barrier"]
                            done = c.json()
                            with lock:
                                acknowledged.append((done["table"], done["barrier"],
                                                     done["snapshot_id"]))
                else:
                    call("POST", "/versions", json={
                        "consistency": rng.choice(["strong", "weak"]),
                        "tables": [source.replace("/", "."), sink.replace("/", ".")]})
            if rng.random() < 0.5:
                call("POST", f"/unregister/{job}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "clients did not finish in time"
    assert server_errors == []
    assert len(acknowledged) > CLIENTS  # the run did real work

    with database.engine.connect() as conn:
        stored = {(f"{c}.{d}.{n}", b, s) for c, d, n, b, s in conn.execute(text(
            "SELECT t.catalog, t.database, t.name, b.barrier, b.snapshot_id "
            "FROM barriers b JOIN tables t ON t.id = b.table_id WHERE NOT b.rolled_back"))}
        missing = [a for a in acknowledged if a not in stored]
        assert missing == []
        writers = conn.execute(text(
            "SELECT jt.table_id, COUNT(*) FROM job_tables jt JOIN jobs j ON j.name = jt.job_name "
            "WHERE j.state = 'running' AND jt.role = 'sink' GROUP BY jt.table_id "
            "HAVING COUNT(*) > 1")).all()
        assert writers == []
        mismatched = conn.execute(text(
            "SELECT t.id FROM tables t WHERE t.latest_barrier IS DISTINCT FROM "
            "(SELECT MAX(b.barrier) FROM barriers b WHERE b.table_id = t.id AND NOT b.rolled_back)"
        )).all() if database.dialect == "postgresql" else conn.execute(text(
            "SELECT t.id FROM tables t WHERE t.latest_barrier IS NOT "
            "(SELECT MAX(b.barrier) FROM barriers b WHERE b.table_id = t.id AND NOT b.rolled_back)"
        )).all()
        assert mismatched == []
        # Snapshots recorded per table never go back to an older one except as heartbeats.
        for (table,) in conn.execute(text("SELECT id FROM tables")):
            rows = conn.execute(text(
                "SELECT snapshot_id FROM barriers WHERE table_id = :t AND NOT rolled_back "
                "ORDER BY barrier"), {"t": table}).scalars().all()
            seen: set[int] = set()
            previous = None
            for snapshot in rows:
                assert snapshot == previous or snapshot not in seen
                seen.add(snapshot)
                previous = snapshot
