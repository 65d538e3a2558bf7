"""Deadlocks between locking paths, on PostgreSQL with two server processes.

Every path that locks takes its locks in one order (``metaservice/db/locks.py``). Were two paths
to take them in different orders, PostgreSQL would break the cycle by failing one transaction
(``DeadlockDetected``, answered 503). These tests run the paths that lock the most against each
other on two processes sharing one database and require no 5xx at all, then check that the
stored data is consistent:

- rollback plans applied downstream (the apply locks the whole pipeline) while clients renew
  leases on every table and ask strong versions with ``lease_seconds``;
- barrier commits to a sink that turns catching up and back while another job joining its
  pipeline starts and stops, and the job itself is stopped and started again.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from sqlalchemy import text

from metaservice.db.session import Database
from tests.metaservice.test_replicas import two_servers  # noqa: F401 - a fixture

SECONDS = 20  # each race runs this long


class Calls:
    """HTTP calls from several threads; every 5xx answer is recorded."""

    def __init__(self, urls: list[str]) -> None:
        self.clients = [httpx.Client(base_url=url, timeout=60) for url in urls]
        self.server_errors: list[str] = []
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, via: int, method: str, path: str, **kw) -> httpx.Response:  # type: ignore[no-untyped-def]
        """The answer; a 5xx is recorded and the call sent again (up to 5 times), so that one
        failure does not stop the race and every 5xx of the run is counted."""
        for _ in range(5):
            response = self.clients[via % len(self.clients)].request(method, path, **kw)
            key = f"{method} {path.split('/')[1]} {response.status_code}"
            with self._lock:
                self.counts[key] = self.counts.get(key, 0) + 1
                if response.status_code >= 500:
                    self.server_errors.append(f"{method} {path} -> {response.status_code} "
                                              f"{response.text[:300]}")
            if response.status_code < 500:
                break
        return response

    def close(self) -> None:
        for client in self.clients:
            client.close()


def _ok(response: httpx.Response, *statuses: int) -> dict:  # type: ignore[type-arg]
    assert response.status_code in (statuses or (200,)), response.text
    return response.json()


def _leased_versions(call: Calls, via: int, body: dict) -> None:  # type: ignore[type-arg]
    """``POST /versions`` with ``lease_seconds`` (``body``), then the lease released, as a query
    releases what it read once it ends: live leases are capped per caller
    (``METASERVICE_MAX_LEASES``), and a fast machine's race would otherwise hit the cap."""
    answer = call(via, "POST", "/versions", json=body)
    _ok(answer, 200, 404, 410)
    if answer.status_code == 200:
        released = call(via + 1, "DELETE", f"/leases/{answer.json()['lease_id']}")
        assert released.status_code in (204, 404, 410), released.text


def _run_for(seconds: float, workers: list[Callable[[threading.Event], None]]) -> None:
    """Run each worker in a thread until ``seconds`` have passed, then stop them all."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def run(worker: Callable[[threading.Event], None]) -> None:
        try:
            worker(stop)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a worker did not stop"
    if failures:
        raise failures[0]


def _step(call: Calls, via: int, job: str, sink: str, snapshots: itertools.count,  # type: ignore[type-arg]
          after: int | None) -> int | None:
    """Hand ``job`` its next barrier and commit it to ``sink``; the barrier, or None."""
    for _ in range(50):
        r = call(via, "POST", f"/jobs/{job}/barriers/next", json={"after": after})
        if r.status_code != 200:
            return None
        position = r.json()
        if position["action"] == "abort":
            after = None
            continue
        if position["action"] != "process":
            time.sleep(0.01)
            continue
        barrier = position["barrier"]
        c = call(via, "POST", f"/commit/{job}/{sink}",
                 json={"barrier": barrier, "snapshot_id": next(snapshots)})
        return barrier if c.status_code == 200 else None
    return None


def _latest_agrees_with_barriers(database: Database) -> None:
    """Per table, ``latest(T)`` is the greatest barrier not rolled back."""
    with database.engine.connect() as conn:
        mismatched = conn.execute(text(
            "SELECT t.name, t.latest_barrier FROM tables t WHERE t.latest_barrier IS DISTINCT FROM "
            "(SELECT MAX(b.barrier) FROM barriers b WHERE b.table_id = t.id AND NOT b.rolled_back)"
        )).all()
    assert mismatched == []


def test_rollbacks_applied_downstream_racing_leases_never_deadlock(
        backend: str, two_servers: list[str], database: Database) -> None:  # noqa: F811
    """r → A → t1 → B → t2. One client steps the pipeline and rolls ``t1`` back to the barrier
    before the newest, applies and completes each plan, and steps the jobs again; meanwhile
    clients on both processes lease snapshots of all three tables, renew their leases and ask
    strong versions of all three with ``lease_seconds``."""
    if backend != "postgresql":
        pytest.skip("several server processes share one database only on PostgreSQL")
    call = Calls(two_servers)
    snapshots = itertools.count(1)
    r, t1, t2 = "lake/db/r", "lake/db/t1", "lake/db/t2"
    qualified = [n.replace("/", ".") for n in (r, t1, t2)]
    _ok(call(0, "POST", f"/register/source/A/{r}"))
    _ok(call(0, "POST", f"/register/sink/A/{t1}"))
    _ok(call(0, "POST", f"/register/source/B/{t1}"))
    _ok(call(0, "POST", f"/register/sink/B/{t2}"))
    _ok(call(0, "POST", f"/tables/{r}/barriers", json={"barrier": 10, "snapshot_id": 10}))
    _ok(call(0, "POST", "/jobs/A/start", json={"from": "latest"}))
    _ok(call(0, "POST", f"/commit/A/{t1}", json={"barrier": 10, "snapshot_id": next(snapshots)}))
    _ok(call(0, "POST", "/jobs/B/start", json={"from": "latest"}))
    _ok(call(0, "POST", f"/commit/B/{t2}", json={"barrier": 10, "snapshot_id": next(snapshots)}))
    applied: list[int] = []

    def roll_back(stop: threading.Event) -> None:
        barrier = 10
        while not stop.is_set():
            barrier += 10
            _ok(call(0, "POST", f"/tables/{r}/barriers",
                     json={"barrier": barrier, "snapshot_id": barrier}))
            assert _step(call, 0, "A", t1, snapshots, barrier - 10) == barrier
            assert _step(call, 1, "B", t2, snapshots, barrier - 10) == barrier
            plan = _ok(call(1, "POST", "/rollback-plans",
                            json={"table": qualified[1], "barrier": barrier - 10}), 201)
            done = _ok(call(0, "POST", f"/rollback-plans/{plan['id']}/apply"))
            assert done["state"] == "applied", done
            _ok(call(1, "POST", f"/rollback-plans/{plan['id']}/complete"))
            applied.append(barrier)
            latest = _ok(call(0, "GET", f"/tables/{t1}/barriers"))["latest_barrier"]
            assert latest == barrier - 10, (barrier, latest)
            # The jobs redo the barrier the rollback took back.
            assert _step(call, 1, "A", t1, snapshots, barrier) == barrier
            assert _step(call, 0, "B", t2, snapshots, barrier) == barrier

    def lease(index: int) -> Callable[[threading.Event], None]:
        def worker(stop: threading.Event) -> None:
            lease_id: str | None = None
            for n in itertools.count():
                if stop.is_set():
                    return
                via = index + n
                if lease_id is None:
                    v = call(via, "POST", "/versions", json={"tables": qualified})
                    if v.status_code != 200:
                        continue
                    held = [{"table": t, "snapshot_id": x["snapshot_id"]}
                            for t, x in v.json()["versions"].items()]
                    c = call(via, "POST", "/leases",
                             json={"holder": f"reader{index}", "ttl_seconds": 30,
                                   "snapshots": held})
                    _ok(c, 201, 404, 410)
                    if c.status_code == 201:
                        lease_id = c.json()["lease_id"]
                elif n % 3 == 0:
                    _leased_versions(call, via, {"tables": qualified, "lease_seconds": 30,
                                                 "holder": f"query{index}"})
                else:
                    renewed = call(via, "POST", f"/leases/{lease_id}/renew",
                                   json={"ttl_seconds": 30})
                    _ok(renewed, 200, 410)
                    if renewed.status_code == 410:
                        lease_id = None
        return worker

    try:
        _run_for(SECONDS, [roll_back, *(lease(i) for i in range(6))])
    finally:
        call.close()
    assert call.server_errors == [], (len(call.server_errors), call.server_errors[:3], call.counts)
    assert len(applied) >= 3, call.counts  # the race did real work
    assert call.counts.get("POST leases 200", 0) > 50, call.counts
    _latest_agrees_with_barriers(database)
    with database.engine.connect() as conn:
        fenced = conn.execute(text("SELECT COUNT(*) FROM rollback_fences")).scalar_one()
        kept = {name: latest for name, latest in conn.execute(
            text("SELECT name, latest_barrier FROM tables"))}
    assert fenced == 0  # every plan applied was completed
    assert kept == {"r": applied[-1], "t1": applied[-1], "t2": applied[-1]}


def test_commits_racing_topology_changes_and_catching_up_never_deadlock(
        backend: str, two_servers: list[str], database: Database) -> None:  # noqa: F811
    """r1 → J → t, and a pipeline r2 → L → w far ahead of it. Job K (sources w and t, sink u)
    starts and stops over and over: each start merges the two pipelines, so t turns catching up
    (its floor is w's cut) and back when K stops. Meanwhile ingestion reports r1, J steps and
    commits to t, J is stopped and started again now and then, and readers hold leases on the
    tables, all spread over both processes."""
    if backend != "postgresql":
        pytest.skip("several server processes share one database only on PostgreSQL")
    call = Calls(two_servers)
    snapshots = itertools.count(1)
    r1, t, r2, w, u = "lake/db/r1", "lake/db/t", "lake/db/r2", "lake/db/w", "lake/db/u"
    _ok(call(0, "POST", f"/tables/{r2}/barriers", json={"barrier": 1_000_000, "snapshot_id": 1}))
    _ok(call(0, "POST", f"/register/source/L/{r2}"))
    _ok(call(0, "POST", f"/register/sink/L/{w}"))
    _ok(call(0, "POST", "/jobs/L/start", json={"from": "latest"}))
    _ok(call(0, "POST", f"/commit/L/{w}",
             json={"barrier": 1_000_000, "snapshot_id": next(snapshots)}))
    _ok(call(0, "POST", f"/tables/{r1}/barriers", json={"barrier": 1000, "snapshot_id": 1000}))
    barriers = itertools.count(1001)
    acknowledged: list[tuple[str, int]] = []
    toggles = {"K": 0, "J": 0}

    def register_j() -> None:
        _ok(call(0, "POST", f"/register/source/J/{r1}"))
        _ok(call(0, "POST", f"/register/sink/J/{t}"))

    register_j()
    _ok(call(0, "POST", "/jobs/J/start", json={"from": "latest"}))

    def ingest(stop: threading.Event) -> None:
        while not stop.is_set():
            barrier = next(barriers)
            done = _ok(call(barrier, "POST", f"/tables/{r1}/barriers",
                            json={"barrier": barrier, "snapshot_id": barrier}))
            acknowledged.append((done["table"], done["barrier"]))
            time.sleep(0.005)

    def step_j(stop: threading.Event) -> None:
        after: int | None = None
        for n in itertools.count():
            if stop.is_set():
                return
            done = _step(call, n, "J", t, snapshots, after)
            if done is None:
                time.sleep(0.01)  # J is stopped, or waits
            else:
                after = done
                acknowledged.append(("lake.db.t", done))

    def toggle_k(stop: threading.Event) -> None:
        for n in itertools.count():
            if stop.is_set():
                return
            _ok(call(n, "POST", f"/register/source/K/{w}"))
            _ok(call(n + 1, "POST", f"/register/source/K/{t}"))
            _ok(call(n, "POST", f"/register/sink/K/{u}"))
            _ok(call(n + 1, "POST", "/jobs/K/start", json={"from": "latest"}))
            time.sleep(0.05)
            _ok(call(n, "POST", "/unregister/K"))
            toggles["K"] += 1

    def restart_j(stop: threading.Event) -> None:
        for n in itertools.count():
            if stop.wait(0.4):
                return
            _ok(call(n, "POST", "/unregister/J"))
            register_j()
            _ok(call(n + 1, "POST", "/jobs/J/start"))
            toggles["J"] += 1

    def read(index: int) -> Callable[[threading.Event], None]:
        def worker(stop: threading.Event) -> None:
            for n in itertools.count():
                if stop.is_set():
                    return
                _leased_versions(call, index + n,
                                 {"tables": ["lake.db.r1", "lake.db.t"], "lease_seconds": 30,
                                  "consistency": "strong" if n % 2 else "weak"})

        return worker

    try:
        _run_for(SECONDS, [ingest, step_j, toggle_k, restart_j, *(read(i) for i in range(4))])
    finally:
        call.close()
    assert call.server_errors == [], (len(call.server_errors), call.server_errors[:3], call.counts)
    assert toggles["K"] >= 5 and toggles["J"] >= 5, toggles
    assert sum(1 for name, _ in acknowledged if name == "lake.db.t") >= 3, call.counts
    _latest_agrees_with_barriers(database)
    with database.engine.connect() as conn:
        stored = set(conn.execute(text(
            "SELECT t.catalog || '.' || t.database || '.' || t.name, b.barrier "
            "FROM barriers b JOIN tables t ON t.id = b.table_id WHERE NOT b.rolled_back")).tuples())
        writers = conn.execute(text(
            "SELECT jt.table_id FROM job_tables jt JOIN jobs j ON j.name = jt.job_name "
            "WHERE j.state = 'running' AND jt.role = 'sink' GROUP BY jt.table_id "
            "HAVING COUNT(*) > 1")).all()
    assert [a for a in acknowledged if a not in stored] == []  # no acknowledged commit is lost
    assert writers == []
