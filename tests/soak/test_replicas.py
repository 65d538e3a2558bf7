"""Two ``metaservice serve`` replicas on one PostgreSQL behind haproxy, configured by
``deploy/haproxy/haproxy.cfg``: a SIGKILLed replica never surfaces as a 5xx, and while the
database is down the replicas answer 503 in the contract's error shape and recover by themselves."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from metaservice_soak.postgres import PrivateCluster
from metaservice_soak.replicas import ServerPool
from tests.soak.conftest import require_haproxy

pytestmark = pytest.mark.slow  # PostgreSQL, two server processes and haproxy

CLIENTS = 4


@pytest.fixture
def replicas(private_cluster: PrivateCluster, tmp_path: Path) -> Iterator[ServerPool]:
    require_haproxy()
    pool = ServerPool(private_cluster.url, tmp_path / "warehouse", tmp_path / "logs",
                      replicas=2, balancer=True)
    pool.prepare()
    pool.start()
    try:
        yield pool
    finally:
        pool.stop()


class Clients:
    """``CLIENTS`` threads reporting root barriers (explicit barriers, so that a repeat is an
    exact repeat) and reading strong versions through haproxy, until stopped."""

    def __init__(self, pool: ServerPool) -> None:
        self.pool = pool
        self.acknowledged: dict[str, dict[int, int]] = {}  # table -> barrier -> snapshot
        self.statuses: dict[int, int] = {}
        self.server_errors: list[str] = []
        self.closed_without_answer = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(i,)) for i in range(CLIENTS)]

    def __enter__(self) -> Clients:
        for thread in self.threads:
            thread.start()
        return self

    def answered(self) -> int:
        with self.lock:
            return sum(self.statuses.values())

    def wait_for_answers(self, count: int, timeout: float = 60) -> None:
        """Until ``count`` more requests have been answered than now: the load is running
        (through whatever was just killed or restarted)."""
        target = self.answered() + count
        deadline = time.monotonic() + timeout
        while self.answered() < target:
            assert time.monotonic() < deadline, f"fewer than {count} answers in {timeout} s"
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def _call(self, http: httpx.Client, method: str, path: str, **kw) -> httpx.Response:  # type: ignore[no-untyped-def]
        while True:
            try:
                response = http.request(method, path, **kw)
            except httpx.RemoteProtocolError:
                # haproxy closed a kept-alive connection whose replica died before answering:
                # the request is idempotent (an exact repeat, or a read), so it is repeated
                with self.lock:
                    self.closed_without_answer += 1
                continue
            with self.lock:
                self.statuses[response.status_code] = self.statuses.get(
                    response.status_code, 0) + 1
                if response.status_code >= 500:
                    self.server_errors.append(f"{method} {path} -> {response.status_code} "
                                              f"{response.text[:200]}")
            return response

    def _client(self, index: int) -> None:
        table = f"lake/soak/root{index}"
        base = int(time.time() * 1000)
        with httpx.Client(base_url=self.pool.url, timeout=60, headers={
                "Authorization": f"Bearer {self.pool.token}"}) as http:
            step = 0
            while not self.stopping.is_set():
                step += 1
                answer = self._call(http, "POST", f"/tables/{table}/barriers",
                                    json={"snapshot_id": step, "barrier": base + step})
                if answer.status_code == 200:
                    with self.lock:
                        self.acknowledged.setdefault(table, {})[base + step] = step
                self._call(http, "GET", f"/version/strong/{table}")


def stored_barriers(pool: ServerPool, table: str) -> dict[int, int]:
    found: dict[int, int] = {}
    before = None
    with httpx.Client(base_url=pool.url, timeout=60,
                      headers={"Authorization": f"Bearer {pool.token}"}) as http:
        while True:
            params = {"limit": 1000, **({"before": before} if before is not None else {})}
            page = http.get(f"/tables/{table}/barriers", params=params).json()["barriers"]
            if not page:
                return found
            found.update({b["barrier"]: b["snapshot_id"] for b in page})
            before = min(b["barrier"] for b in page)


def test_a_killed_replica_is_no_5xx_and_loses_no_acknowledged_write(
        replicas: ServerPool) -> None:
    with Clients(replicas) as clients:
        clients.wait_for_answers(40)
        for index in (0, 1, 0):
            replicas.kill(index)
            clients.wait_for_answers(40)  # answered by the other replica alone
            replicas.restart(index)
            clients.wait_for_answers(40)
    assert clients.server_errors == []
    assert sum(clients.statuses.values()) > 100
    for table, acknowledged in clients.acknowledged.items():
        stored = stored_barriers(replicas, table)
        assert {b: stored.get(b) for b in acknowledged} == acknowledged
    # haproxy sent requests of the dead replicas to the live one (its log's retry marker)
    assert "/+1 " in replicas.balancer_log.read_text()


def test_while_the_database_is_down_replicas_answer_503_in_the_error_shape(
        replicas: ServerPool, private_cluster: PrivateCluster) -> None:
    headers = {"Authorization": f"Bearer {replicas.token}"}
    with httpx.Client(base_url=replicas.url, timeout=60, headers=headers) as http:
        assert http.post("/tables/lake/soak/root/barriers",
                         json={"snapshot_id": 1}).status_code == 200
        private_cluster.crash()
        for _ in range(4):  # both replicas, each over the connections it had
            answer = http.post("/tables/lake/soak/root/barriers", json={"snapshot_id": 2})
            assert answer.status_code == 503
            assert answer.json()["error"]["code"] == "database_unavailable"
            assert answer.headers["Retry-After"] == "1"
        # /healthz keeps both replicas in haproxy's pool: their answer, not haproxy's
        assert "is DOWN" not in replicas.balancer_log.read_text()
        private_cluster.start()
        deadline = time.monotonic() + 30
        while True:
            answer = http.post("/tables/lake/soak/root/barriers", json={"snapshot_id": 2})
            if answer.status_code == 200 or time.monotonic() > deadline:
                break
            assert answer.status_code == 503
            time.sleep(0.2)
        assert answer.status_code == 200
        assert http.get("/version/strong/lake/soak/root").json()["snapshot_id"] == 2
