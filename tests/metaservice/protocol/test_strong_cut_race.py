"""Strong cuts never move backwards under any interleaving (docs/contract.md#strong), on PostgreSQL
with two server processes: a commit that lets a catching-up table rejoin its component races a root
report that moves the component's cut, while readers poll the strong version.

Each trial has its own component ``r<i> → J<i> → t<i>``: r completed 1000 before J started, so
t joins catching up and J holds 1000. Then, released together on two different processes, J
commits 1000 to t (which may let t rejoin) and ingestion reports r at 1100 (which moves the cut
to 1100 while t is still catching up). Readers poll ``GET /version/strong`` of r on both
processes throughout; none may ever see the barrier decrease (the issue's report: 1000, 1100,
1000).
"""

from __future__ import annotations

import itertools
import threading
import time

import httpx
import pytest

from metaservice.db.session import Database
from tests.metaservice.test_replicas import two_servers  # noqa: F401 - a fixture

TRIALS = 30
READERS = 3


def _ok(response: httpx.Response) -> dict:  # type: ignore[type-arg]
    assert response.status_code == 200, response.text
    return response.json()


def test_a_rejoin_racing_a_root_report_never_moves_the_strong_cut_back(
        backend: str, two_servers: list[str], database: Database) -> None:  # noqa: F811
    if backend != "postgresql":
        pytest.skip("several server processes share one database only on PostgreSQL")
    clients = [httpx.Client(base_url=url, timeout=60) for url in two_servers]
    readers = [httpx.Client(base_url=two_servers[i % 2], timeout=60) for i in range(READERS)]
    backwards: list[tuple[int, list[int]]] = []
    try:
        for trial in range(TRIALS):
            a, b = clients[trial % 2], clients[(trial + 1) % 2]
            root, sink, job = f"lake/db/r{trial}", f"lake/db/t{trial}", f"J{trial}"
            _ok(a.post(f"/tables/{root}/barriers", json={"snapshot_id": 1, "barrier": 1000}))
            _ok(a.post(f"/register/source/{job}/{root}"))
            _ok(a.post(f"/register/sink/{job}/{sink}"))
            assert _ok(a.post(f"/jobs/{job}/start", json={"from": "latest"}))["barrier"] == 1000

            stop = threading.Event()
            seen: list[list[int]] = [[] for _ in range(READERS)]

            def read(i: int, seen: list[list[int]] = seen, root: str = root,
                     stop: threading.Event = stop) -> None:
                while not stop.is_set():
                    r = readers[i].get(f"/version/strong/{root}")
                    if r.status_code == 200:
                        seen[i].append(r.json()["barrier"])

            gate = threading.Barrier(2)
            answers: list[httpx.Response | None] = [None, None]

            def commit(job: str = job, sink: str = sink, gate: threading.Barrier = gate,
                       answers: list[httpx.Response | None] = answers,
                       b: httpx.Client = b) -> None:
                gate.wait(timeout=60)
                answers[0] = b.post(f"/commit/{job}/{sink}",
                                    json={"barrier": 1000, "snapshot_id": 2})

            def report(root: str = root, gate: threading.Barrier = gate,
                       answers: list[httpx.Response | None] = answers,
                       a: httpx.Client = a) -> None:
                gate.wait(timeout=60)
                answers[1] = a.post(f"/tables/{root}/barriers",
                                    json={"snapshot_id": 3, "barrier": 1100})

            reading = [threading.Thread(target=read, args=(i,)) for i in range(READERS)]
            for t in reading:
                t.start()
            time.sleep(0.02)
            racing = [threading.Thread(target=commit), threading.Thread(target=report)]
            for t in racing:
                t.start()
            for t in racing:
                t.join(timeout=60)
            time.sleep(0.05)
            stop.set()
            for t in reading:
                t.join(timeout=60)
            for answer in answers:
                assert answer is not None and answer.status_code == 200, answer
            for sequence in seen:
                if any(x > y for x, y in itertools.pairwise(sequence)):
                    backwards.append((trial, sequence))
            # One more read after everything settled: never below what was served.
            final = _ok(clients[0].get(f"/version/strong/{root}"))["barrier"]
            served = max((max(s) for s in seen if s), default=final)
            if final < served:
                backwards.append((trial, [served, final]))
        trials = sorted({trial for trial, _ in backwards})
        assert not trials, f"strong cuts moved backwards in {len(trials)} of {TRIALS} trials: " \
                           f"{backwards[:3]}"
    finally:
        for c in clients + readers:
            c.close()
