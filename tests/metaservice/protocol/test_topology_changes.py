"""Strong cuts never move backwards for any table across topology changes (docs/contract.md#strong,
docs/decisions.md "Strong cuts and catching up"): randomized histories of the chaos soak's
pipeline shape, with its jobs joining one registration at a time, stopping and starting again
while others catch up.

Two roots ``o`` and ``p``; siblings ``B`` (o → ob) and ``S`` (o → os); a join ``J`` (ob, os, p →
l); and ``X`` (o → xs), a job that joins and leaves. Each history ingests into the roots,
registers the jobs in a drawn order (each source and sink a registration of its own, roots
moving in between), then steps the running jobs, ingests, and stops or starts ``S``, ``X`` and
``J``. After every call each table's strong version is read; the reference is the greatest one
it was served before, which it must never fall below (no rollback happens here). Such a split
once made a table catching up lose its floor, and its cut moved back by up to a few barriers
(the soak on S3 saw it when a streaming job failed and restarted while the join caught up).
"""

from __future__ import annotations

import os
import random

import httpx
import pytest

from tests.conftest import FAST_SUBSET

TABLES = ("o", "p", "ob", "os", "l", "xs")
JOBS = {"B": (["o"], ["ob"]), "S": (["o"], ["os"]), "J": (["ob", "os", "p"], ["l"]),
        "X": (["o"], ["xs"])}
# 20 per backend: 3 of these 20 failed on SQLite before the split rules (e2363f5); set the
# variable higher to look further. The fast subset runs a fifth of them.
HISTORIES = int(os.environ.get("METASERVICE_TOPOLOGY_HISTORIES", "4" if FAST_SUBSET else "20"))
STEPS = 60


class Pipeline:
    """One history: the calls, the barriers, and each table's greatest strong cut served."""

    def __init__(self, client: httpx.Client, seed: int) -> None:
        self.client, self.rng = client, random.Random(seed)
        self.now, self.snapshots = 1000, 0
        self.served: dict[str, int] = {}
        self.held: dict[str, int | None] = {}
        self.running: set[str] = set()
        self.log: list[str] = []

    def check(self) -> None:
        for table in TABLES:
            answer = self.client.get(f"/version/strong/lake/db/{table}")
            if answer.status_code != 200:  # catching up, or no cut yet: not an answer
                continue
            barrier = answer.json()["barrier"]
            before = self.served.get(table)
            assert before is None or barrier >= before, (
                f"{table}'s strong cut moved back from {before} to {barrier} after:\n"
                + "\n".join(self.log[-25:]))
            self.served[table] = max(barrier, before or barrier)

    def call(self, what: str, method: str, url: str, body: dict | None = None) -> httpx.Response:  # type: ignore[type-arg]
        response = self.client.request(method, url, json=body)
        assert response.status_code < 500, (what, response.text)
        self.log.append(f"{what}: {response.status_code} {response.text[:100]}")
        self.check()
        return response

    def ingest(self) -> None:
        table = self.rng.choice(["o", "p"])
        self.now += self.rng.choice([1, 3, 7])
        self.snapshots += 1
        self.call(f"root {table} {self.now}", "POST", f"/tables/lake/db/{table}/barriers",
                  {"snapshot_id": self.snapshots, "barrier": self.now})

    def join(self, job: str) -> None:
        sources, sinks = JOBS[job]
        registrations = [("source", t) for t in sources] + [("sink", t) for t in sinks]
        self.rng.shuffle(registrations)
        for role, table in registrations:
            self.call(f"register {role} {job} {table}", "POST",
                      f"/register/{role}/{job}/lake/db/{table}")
            if self.rng.random() < 0.3:
                self.ingest()
        self.call(f"start {job}", "POST", f"/jobs/{job}/start", {"from": "latest"})
        self.running.add(job)
        self.held[job] = None

    def leave(self, job: str) -> None:
        self.call(f"unregister {job}", "POST", f"/unregister/{job}")
        self.running.discard(job)

    def step(self, job: str) -> None:
        answer = self.call(f"next {job}", "POST", f"/jobs/{job}/barriers/next",
                           {"after": self.held.get(job)})
        position = answer.json() if answer.status_code == 200 else {}
        if position.get("action") != "process":
            return
        for sink in JOBS[job][1]:
            self.snapshots += 1
            self.call(f"commit {job} {sink} {position['barrier']}", "POST",
                      f"/commit/{job}/lake/db/{sink}",
                      {"barrier": position["barrier"], "snapshot_id": self.snapshots})
        self.held[job] = position["barrier"]

    def run(self) -> None:
        for _ in range(self.rng.randint(1, 4)):
            self.ingest()
        for job in self.rng.sample(["B", "S", "J"], 3):
            self.join(job)
            for _ in range(self.rng.randint(0, 3)):
                self.ingest()
        for _ in range(STEPS):
            draw = self.rng.random()
            if draw < 0.35:
                self.ingest()
            elif draw < 0.8 and self.running:
                self.step(self.rng.choice(sorted(self.running)))
            elif draw < 0.9:
                job = self.rng.choice(["S", "X", "J"])
                if job in self.running:
                    self.leave(job)
                else:
                    self.join(job)


@pytest.mark.parametrize("seed", range(HISTORIES))
def test_no_table_s_strong_cut_moves_back_across_joins_and_leaves(client: httpx.Client,
                                                                   seed: int) -> None:
    Pipeline(client, seed).run()
