"""MetaService on a PostgreSQL that survives its primary: two ``metaservice serve`` replicas
behind haproxy on a three-member Patroni cluster (``deploy/patroni/``, run by
``metaservice_soak/patroni.py``), written to throughout while the leader is killed, frozen
(cut off from etcd) and switched over. Each fault changes the leader; no acknowledged write
is lost; every request during a change is answered, 503 ``database_unavailable`` with
``Retry-After`` or a success (no 500, no hang); strong versions never move backwards; writes
succeed again within 30 s of the fault.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from metaservice_soak.patroni import (
    PatroniCluster,
    PatroniError,
    missing_programs,
    time_to_first_write,
)
from metaservice_soak.replicas import ServerPool
from tests.conftest import missing
from tests.soak.conftest import require_haproxy
from tests.soak.test_replicas import stored_barriers

pytestmark = pytest.mark.slow  # etcd, three PostgreSQL members, two servers, two haproxys

GOAL_SECONDS = 30.0
"""From the leader's death to the first successful write (deploy/patroni/patroni.yml)."""
REQUEST_TIMEOUT = 45.0
"""A request unanswered this long is a hang."""


@pytest.fixture
def patroni(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PatroniCluster]:
    absent = missing_programs()
    if absent:
        missing(f"the Patroni cluster needs {', '.join(absent)} (bash "
                ".ci/install-system-packages.sh)", required_by="METASERVICE_REQUIRE_PATRONI")
    root = tmp_path_factory.mktemp("patroni")
    cluster = PatroniCluster(root / "cluster")
    try:
        cluster.start()
    except PatroniError:
        cluster.remove(keep_logs=root / "logs")
        raise
    try:
        yield cluster
    finally:
        cluster.remove(keep_logs=root / "logs")


@pytest.fixture
def servers(patroni: PatroniCluster, tmp_path: Path) -> Iterator[ServerPool]:
    require_haproxy()
    pool = ServerPool(patroni.url, tmp_path / "warehouse", tmp_path / "logs", replicas=2,
                      balancer=True)
    pool.prepare()
    pool.start()
    try:
        yield pool
    finally:
        pool.stop()


class Writers:
    """Two threads reporting root barriers (explicit barriers: a repeat is an exact repeat)
    and reading each table's strong version after each report, one thread taking leases on
    the acknowledged snapshots; every write logged with when it was sent and answered."""

    def __init__(self, pool: ServerPool) -> None:
        self.pool = pool
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.writes: list[tuple[float, float, bool]] = []
        self.reports: dict[str, dict[int, int]] = {}  # table -> barrier -> snapshot
        self.leases: dict[str, tuple[str, int]] = {}  # lease id -> table, snapshot
        self.refusals: dict[str, int] = {}  # each answer that is not a success, by kind
        self.wrong: list[str] = []  # a 5xx other than 503 database_unavailable, a hang
        self.backwards: list[str] = []
        self.threads = [threading.Thread(target=self._report, args=(i,)) for i in range(2)]
        self.threads.append(threading.Thread(target=self._lease))

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=REQUEST_TIMEOUT + 10)

    def acknowledged(self) -> int:
        with self.lock:
            return sum(1 for _, _, ok in self.writes if ok)

    def wait_for_writes(self, count: int, timeout: float = 90) -> None:
        target = self.acknowledged() + count
        deadline = time.monotonic() + timeout
        while self.acknowledged() < target:
            assert time.monotonic() < deadline, (f"fewer than {count} writes in {timeout} s: "
                                                 f"{self.refusals} {self.wrong[-3:]}")
            time.sleep(0.05)

    def _client(self) -> httpx.Client:
        return httpx.Client(base_url=self.pool.url, timeout=REQUEST_TIMEOUT,
                            headers={"Authorization": f"Bearer {self.pool.token}"})

    def _call(self, http: httpx.Client, method: str, path: str, *, write: bool,
              **kw) -> httpx.Response | None:  # type: ignore[no-untyped-def]
        sent = time.time()
        try:
            answer = http.request(method, path, **kw)
        except httpx.TimeoutException:
            with self.lock:
                self.wrong.append(f"{method} {path}: no answer in {REQUEST_TIMEOUT} s")
            return None
        except httpx.TransportError as exc:
            with self.lock:
                self.wrong.append(f"{method} {path}: {type(exc).__name__} {exc}")
            return None
        ok = answer.status_code < 300
        with self.lock:
            if write:
                self.writes.append((sent, time.time(), ok))
            if not ok:
                code = answer.json().get("error", {}).get("code", "?")
                kind = f"{answer.status_code} {code}"
                self.refusals[kind] = self.refusals.get(kind, 0) + 1
                if (answer.status_code != 503 or code != "database_unavailable"
                        or answer.headers.get("Retry-After") != "1"):
                    self.wrong.append(f"{method} {path} -> {kind} {answer.text[:200]}")
        return answer

    def _report(self, index: int) -> None:
        table = f"lake/failover/root{index}"
        base, step, strongest = int(time.time() * 1000), 0, 0
        with self._client() as http:
            while not self.stopping.is_set():
                step += 1
                answer = self._call(http, "POST", f"/tables/{table}/barriers", write=True,
                                    json={"snapshot_id": step, "barrier": base + step})
                if answer is not None and answer.status_code == 200:
                    with self.lock:
                        self.reports.setdefault(table, {})[base + step] = step
                read = self._call(http, "GET", f"/version/strong/{table}", write=False)
                if read is not None and read.status_code == 200:
                    barrier = read.json()["barrier"]
                    if barrier < strongest:
                        self.backwards.append(f"{table}: {barrier} after {strongest}")
                    strongest = max(strongest, barrier)
                if answer is None or answer.status_code != 200:
                    time.sleep(0.2)  # Retry-After is 1 s; a fifth keeps the outage measured

    def _lease(self) -> None:
        table = "lake/failover/root0"
        with self._client() as http:
            while not self.stopping.is_set():
                time.sleep(0.25)
                with self.lock:
                    held = self.reports.get(table)
                    snapshot = max(held.values()) if held else None
                if snapshot is None:
                    continue
                answer = self._call(http, "POST", "/leases", write=True, json={
                    "holder": "failover-test", "ttl_seconds": 3600,
                    "snapshots": [{"table": "lake.failover.root0", "snapshot_id": snapshot}]})
                if answer is not None and answer.status_code == 201:
                    with self.lock:
                        self.leases[answer.json()["lease_id"]] = (table, snapshot)


def test_failovers_lose_no_acknowledged_write(patroni: PatroniCluster,
                                              servers: ServerPool) -> None:
    figures: list[tuple[str, str, str, float, float | None]] = []
    with Writers(servers) as writers:
        writers.wait_for_writes(30)
        for fault in (patroni.kill_leader, patroni.isolate_leader, patroni.switchover):
            change = fault()
            assert change.new != change.old  # the leader changed
            writers.wait_for_writes(10)  # through the new leader
            if fault != patroni.switchover:  # (a switchover's old leader rejoins by itself)
                patroni.recover()  # the old leader's member back, a standby: three again
                writers.wait_for_writes(10)
            with writers.lock:
                writes = list(writers.writes)
            first = time_to_first_write(writes, change.started_at, change.elected_after + 20)
            figures.append((change.kind, change.old, change.new,
                            round(change.elected_after, 1), first and round(first, 1)))
    print("failovers (kind, old, new, elected after s, first write after s):", figures)
    print("refusals:", writers.refusals)

    assert writers.wrong == []
    assert writers.backwards == []
    for kind, _, _, _, first in figures:
        assert first is not None and first <= GOAL_SECONDS, (kind, figures)
    # the refusals were the failovers' 503s, and each fault had some
    assert set(writers.refusals) <= {"503 database_unavailable"}
    for table, acknowledged in writers.reports.items():
        stored = stored_barriers(servers, table)
        lost = {b: s for b, s in acknowledged.items() if stored.get(b) != s}
        assert lost == {}, f"{len(lost)} of {len(acknowledged)} acknowledged reports lost"
    with httpx.Client(base_url=servers.url, timeout=30,
                      headers={"Authorization": f"Bearer {servers.token}"}) as http:
        for lease_id in writers.leases:
            answer = http.get(f"/leases/{lease_id}")
            assert answer.status_code == 200, (lease_id, answer.text)
    assert len(writers.leases) > 10
    assert len({c.new for c in patroni.changes} | {c.old for c in patroni.changes}) >= 2
