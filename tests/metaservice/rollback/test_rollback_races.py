"""A rollback apply racing the commit of the barrier a job holds, on two server processes.

r → A → t1: A committed 20 and holds 30; a plan revises r at 25. The apply (on one process) and
A's commit of 30 to t1 (on the other) are sent together, many rounds at varied offsets. Whichever
wins, afterwards the barrier A restarts after is one t1 still has: were A's last committed
barrier left at the rolled-back 30 while t1 went back to 20, A would go on after 30 and never
write the data between (silent loss).
"""

from __future__ import annotations

import random
import threading
import time

import httpx

from tests.metaservice.test_replicas import two_servers  # noqa: F401 - a fixture

ROUNDS = 20


def _ok(response: httpx.Response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


def _prepare(http: httpx.Client, n: int) -> tuple[str, str, str]:
    """Round ``n``'s pipeline, with A holding 30; the job, its sink, and the planned rollback."""
    job, r, t1 = f"A{n}", f"lake/db/r{n}", f"lake/db/t{n}"
    _ok(http.post(f"/register/source/{job}/{r}"))
    _ok(http.post(f"/register/sink/{job}/{t1}"))
    for barrier in (10, 20):
        _ok(http.post(f"/tables/{r}/barriers", json={"barrier": barrier, "snapshot_id": barrier}))
    assert _ok(http.post(f"/jobs/{job}/start"))["barrier"] == 20
    _ok(http.post(f"/commit/{job}/{t1}", json={"barrier": 20, "snapshot_id": 1020}))
    _ok(http.post(f"/tables/{r}/barriers", json={"barrier": 30, "snapshot_id": 30}))
    assert _ok(http.post(f"/jobs/{job}/barriers/next", json={"after": 20}))["barrier"] == 30
    plan = _ok(http.post("/rollback-plans", json={"table": r.replace("/", "."), "barrier": 25}),
               201)
    return job, t1, plan["id"]


def _race(apply_via: httpx.Client, commit_via: httpx.Client, plan_id: str, job: str, t1: str,
          delay: float) -> dict[str, httpx.Response]:
    """The apply and the commit of 30, released together; the commit ``delay`` s later."""
    answers: dict[str, httpx.Response] = {}
    gate = threading.Barrier(2)

    def apply() -> None:
        gate.wait()
        answers["apply"] = apply_via.post(f"/rollback-plans/{plan_id}/apply")

    def commit() -> None:
        gate.wait()
        time.sleep(delay)
        answers["commit"] = commit_via.post(f"/commit/{job}/{t1}",
                                            json={"barrier": 30, "snapshot_id": 1030})

    threads = [threading.Thread(target=apply), threading.Thread(target=commit)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return answers


def test_apply_racing_the_commit_of_the_held_barrier_never_skips_data(
        two_servers: list[str]) -> None:  # noqa: F811
    rng = random.Random(14)
    first, second = (httpx.Client(base_url=url, timeout=60) for url in two_servers)
    losses: list[str] = []
    try:
        for n in range(ROUNDS):
            job, t1, plan_id = _prepare(first, n)
            delay = rng.uniform(0, 0.02)  # the commit lands anywhere within the apply
            answers = _race(first, second, plan_id, job, t1, delay)
            assert answers["apply"].status_code == 200, answers["apply"].text
            # The commit wins (200) or meets the fence or the invalidated pin (409).
            assert answers["commit"].status_code in (200, 409), answers["commit"].text

            kept = _ok(first.get(f"/tables/{t1}/barriers"))["latest_barrier"]
            assert kept == 20  # 30 is rolled back whoever won
            last = _ok(first.get(f"/jobs/{job}"))["last_committed_barrier"]
            if last is not None and last > kept:
                losses.append(f"round {n} (commit after {delay * 1000:.1f} ms): {job} restarts "
                              f"after {last}, {t1} keeps {kept}")
            step = _ok(first.post(f"/jobs/{job}/barriers/next", json={"after": 30}))
            assert step["action"] == "abort" and step["barrier"] == 30, step
            if step.get("restart_after") is not None and step["restart_after"] > kept:
                losses.append(f"round {n}: abort says restart after {step['restart_after']}")
    finally:
        first.close()
        second.close()
    assert losses == []
