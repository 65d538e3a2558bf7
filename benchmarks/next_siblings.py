"""``next`` with 20 sibling jobs on one root next to a single job on one root.

Alignment (docs/contract.md#alignment, ``core/protocol.py``) makes
``POST /jobs/{job}/barriers/next`` read the whole component: every other running job of it, the
barriers they hold and the newest rows of their sinks. This measures what that costs when one root
is read by many jobs.

On PostgreSQL and on SQLite: one fresh, migrated database and one ``metaservice serve``
process (one uvicorn worker, as deployed) holding two pipelines, built over HTTP:

- *single*: root ``lake.single.r`` read by one job, ``single-j0``, writing ``lake.single.s0``;
- *siblings*: root ``lake.siblings.r`` read by 20 sibling jobs ``siblings-j<i>``, each writing
  its own ``lake.siblings.s<i>`` (one component of 21 tables and 20 jobs).

Each job is started (``from: "latest"``) and commits its first barrier. Then, round after round,
the root gets a new barrier (a root report, the barrier assigned by the service) and every job
of the pipeline in turn asks ``next`` with the barrier it processed last, must be handed the new
root barrier (checked), and commits a snapshot for it, so jobs advance as real ones do and the
component's history grows. Rounds of the two pipelines alternate in blocks (three of each), so a
change in the machine's load colours both.

The client is a plain loop over one keep-alive ``http.client`` connection (standard library):
each request depends on the previous answer (the barrier to commit, the barrier to ask after),
which the load generator (``benchmarks/_loadgen.py``, a request factory without answers) does
not model, and ``http.client`` costs the client less CPU than httpx. The latency of every
``next`` is taken on the client; server CPU is read from ``/proc`` for the server process before
and after each ``next`` (summed, so the clock tick's granularity averages out) and per round.

Goal: ``next`` with 20 siblings no slower than 2× a single job's ``next`` (medians).
"""

from __future__ import annotations

import http.client
import json
import random
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from benchmarks import _environment as environment
from benchmarks._report import Result, percentile

SIBLINGS = 20
BLOCKS = 3
WARMUP_ROUNDS = 3


class Client:
    """One keep-alive HTTP/1.1 connection; every answer must be 2xx."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)

    def post(self, path: str, body: dict | None = None) -> dict:
        payload = json.dumps(body or {}).encode()
        self.connection.request("POST", path, payload, {"Content-Type": "application/json"})
        answer = self.connection.getresponse()
        data = answer.read()
        if not 200 <= answer.status < 300:
            raise RuntimeError(f"POST {path}: {answer.status} {data[:300]!r}")
        return json.loads(data)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.connection.close()


@dataclass
class Pipeline:
    """One root and its jobs, each with the barrier it processed last."""

    namespace: str
    jobs: int
    after: dict[str, int] = field(default_factory=dict)
    next_ms: list[float] = field(default_factory=list)
    next_cpu_s: float = 0.0
    round_cpu_s: float = 0.0
    rounds: int = 0

    def job(self, i: int) -> str:
        return f"{self.namespace}-j{i}"

    def sink(self, i: int) -> str:
        return f"lake/{self.namespace}/s{i}"


def _snapshot(rng: random.Random) -> int:
    return rng.getrandbits(62)


def set_up(client: Client, p: Pipeline, rng: random.Random) -> None:
    first = client.post(f"/tables/lake/{p.namespace}/r/barriers",
                        {"snapshot_id": _snapshot(rng)})["barrier"]
    for i in range(p.jobs):
        client.post(f"/register/source/{p.job(i)}/lake/{p.namespace}/r")
        client.post(f"/register/sink/{p.job(i)}/{p.sink(i)}")
    for i in range(p.jobs):
        started = client.post(f"/jobs/{p.job(i)}/start", {"from": "latest"})
        if started.get("action") != "process" or started.get("barrier") != first:
            raise RuntimeError(f"start of {p.job(i)}: {started}, expected barrier {first}")
        client.post(f"/commit/{p.job(i)}/{p.sink(i)}",
                    {"barrier": first, "snapshot_id": _snapshot(rng)})
        p.after[p.job(i)] = first


def one_round(client: Client, server: environment.ServerProcess, p: Pipeline,
              rng: random.Random, *, record: bool) -> None:
    """The root gets a new barrier; every job in turn asks ``next`` and commits it."""
    cpu_round = server.cpu_seconds()
    barrier = client.post(f"/tables/lake/{p.namespace}/r/barriers",
                          {"snapshot_id": _snapshot(rng)})["barrier"]
    for i in range(p.jobs):
        job = p.job(i)
        cpu = server.cpu_seconds()
        started = time.perf_counter()
        position = client.post(f"/jobs/{job}/barriers/next", {"after": p.after[job]})
        elapsed_ms = (time.perf_counter() - started) * 1000
        cpu = server.cpu_seconds() - cpu
        if position.get("action") != "process" or position.get("barrier") != barrier:
            raise RuntimeError(f"next of {job} after {p.after[job]}: {position}, expected "
                               f"process {barrier}")
        client.post(f"/commit/{job}/{p.sink(i)}",
                    {"barrier": barrier, "snapshot_id": _snapshot(rng)})
        p.after[job] = barrier
        if record:
            p.next_ms.append(elapsed_ms)
            p.next_cpu_s += cpu
    if record:
        p.round_cpu_s += server.cpu_seconds() - cpu_round
        p.rounds += 1


@dataclass
class Measured:
    single: Pipeline
    siblings: Pipeline
    seconds: float


def measure(backend: str, seconds: float) -> Measured:
    """``seconds`` of rounds per pipeline, in ``BLOCKS`` alternating blocks."""
    database = (environment.postgres_schema("next_siblings") if backend == "postgresql"
                else environment.sqlite_file("next_siblings"))
    rng = random.Random(3)
    single, siblings = Pipeline("single", 1), Pipeline("siblings", SIBLINGS)
    started = time.monotonic()
    with database as url, environment.server_processes(url, count=1) as (server,):
        client = Client(server.url)
        try:
            for p in (single, siblings):
                set_up(client, p, rng)
                for _ in range(WARMUP_ROUNDS):
                    one_round(client, server, p, rng, record=False)
            for _ in range(BLOCKS):
                for p in (single, siblings):
                    until = time.monotonic() + seconds / BLOCKS
                    while time.monotonic() < until:
                        one_round(client, server, p, rng, record=True)
        finally:
            client.close()
    return Measured(single, siblings, time.monotonic() - started)


def _describe(p: Pipeline) -> str:
    steps = len(p.next_ms)
    return (f"p50 {percentile(p.next_ms, 50):.2f} ms, p99 {percentile(p.next_ms, 99):.2f} ms "
            f"over {steps} next ({p.rounds} rounds); server CPU {p.next_cpu_s * 1000 / steps:.2f}"
            f" ms per next, {p.round_cpu_s * 1000 / steps:.2f} ms per step (next + commit + "
            f"1/{p.jobs} root report)")


def run(quick: bool) -> list[Result]:
    seconds = 6.0 if quick else 24.0
    backends = ["postgresql", "sqlite"] if environment.postgres_reachable() else ["sqlite"]
    results: list[Result] = []
    for backend in backends:
        label = "PostgreSQL" if backend == "postgresql" else "SQLite"
        m = measure(backend, seconds)
        single_p50 = percentile(m.single.next_ms, 50)
        siblings_p50 = percentile(m.siblings.next_ms, 50)
        cpu_single = m.single.next_cpu_s / len(m.single.next_ms)
        cpu_siblings = m.siblings.next_cpu_s / len(m.siblings.next_ms)
        results.append(Result.compare(
            f"next p50, {SIBLINGS} sibling jobs on one root ({label})", siblings_p50, "ms",
            baseline="next p50, one job on one root", baseline_value=single_p50,
            higher_is_better=False, at_least=0.5, goal="at most 2× the single job's latency",
            notes=f"{SIBLINGS} siblings: {_describe(m.siblings)}; single job: "
                  f"{_describe(m.single)}; server CPU per next {cpu_siblings / cpu_single:.2f}×"
                  f" the single job's; each next checked to hand out the root's new barrier; "
                  f"{BLOCKS} alternating blocks, {seconds:.0f} s per pipeline, one server "
                  f"process, http.client over loopback"))
    return results


if __name__ == "__main__":
    from benchmarks._report import text_table

    print(text_table(run(quick=True)))
