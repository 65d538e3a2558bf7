"""The benchmark harness itself: the generated section of docs/benchmarks.md is rewritten one
block at a time, prose is kept; the load generator counts what it is told to check."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path

import pytest

from benchmarks import _topology as topology
from benchmarks import versions
from benchmarks.__main__ import Outcome, update_doc
from benchmarks._environment import ServerThread
from benchmarks._loadgen import run_load, sequential
from benchmarks._report import Result

MACHINE = {"date": "2026-11-23 00:00 UTC", "cores": "2"}


def outcome(name: str, value: float) -> Outcome:
    return Outcome(name, [Result.absolute(f"{name} latency", value, "ms", goal="≤ 10 ms",
                                          met_if=lambda v: v <= 10)], seconds=1.0, quick=False)


def test_a_run_rewrites_only_its_block(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nProse before.\n")
    update_doc(doc, [outcome("alpha", 3.0), outcome("beta", 30.0)], MACHINE)
    doc.write_text(doc.read_text() + "\nProse after.\n")

    update_doc(doc, [outcome("beta", 7.0)], MACHINE)
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nProse before.\n")
    assert text.rstrip().endswith("Prose after.")
    assert text.count("<!-- benchmark:alpha -->") == text.count("<!-- benchmark:beta -->") == 1
    alpha = text.split("<!-- benchmark:alpha -->")[1].split("<!-- /benchmark:alpha -->")[0]
    beta = text.split("<!-- benchmark:beta -->")[1].split("<!-- /benchmark:beta -->")[0]
    assert "3.00 ms" in alpha and "| met |" in alpha       # kept from the first run
    assert "7.00 ms" in beta and "30.0" not in beta          # replaced by the second


def test_the_load_generator_counts_checked_answers(app) -> None:  # type: ignore[no-untyped-def]
    with ServerThread(app) as server:
        latencies = sequential(server.url, "/healthz", 0.3, warmup=0.1)
        assert latencies.ok > 0 and latencies.failed == 0 and latencies.warmup_requests > 0
        assert len(latencies.latencies_ms) == latencies.ok

        refused = run_load([server.url], clients=2, warmup=0.0, duration=0.3,
                           make=lambda _c, _n: ("GET", "/healthz", b""),
                           check=lambda body: None if json.loads(body).get("nope") else "no")
        assert refused.ok == 0 and refused.failed > 0 and refused.first_error == "no"

        missing = run_load([server.url], clients=1, warmup=0.0, duration=0.2,
                           make=lambda _c, _n: ("GET", "/no/such/path", b""))
        assert missing.ok == 0 and missing.statuses.get(404, 0) == missing.failed > 0
        assert missing.first_error is not None and missing.first_error.startswith("404")


async def _healthy(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    """An ASGI app answering 200 to anything."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.slow  # idles past a timer
def test_the_loopback_server_keeps_an_idle_connection_past_uvicorn_s_five_seconds() -> None:
    """As ``metaservice serve`` does (``keep_alive_seconds``): a test client whose connection
    idled while a loaded machine ran other threads was reset as it sent its request."""
    with ServerThread(_healthy) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            for pause in (0.0, 6.0):
                time.sleep(pause)
                connection.request("GET", "/healthz")
                answer = connection.getresponse()
                answer.read()
                assert answer.status == 200
                assert connection.sock is not None  # the same connection, not a new one
        finally:
            connection.close()


def test_fan_out_pipelines_expect_the_greatest_barrier_every_table_completed() -> None:
    """Worked by hand: in pipeline 0 the siblings t1 and t3 skip (they completed only the even
    barrier indexes, up to 8), t4 trails the root by 2 (latest 7): the smallest latest is 7,
    which the skipping siblings never completed, so the cut is 6."""
    p = topology.Pipelines(chains=3, length=5, barriers_per_table=10, shape="fan-out")
    assert list(p.completed(0, 0)) == list(range(10))
    assert list(p.completed(0, 1)) == [0, 2, 4, 6, 8]
    assert list(p.completed(0, 2)) == list(range(9))
    assert list(p.completed(0, 4)) == list(range(8))
    assert min(p.latest(k, 0) for k in range(5)) == p.barrier(0, 0, 7)
    assert p.strong_cut(0) == p.barrier(0, 0, 6)
    # Pipeline 1: everyone trails by one more; the smallest latest (6) is one they all completed.
    assert p.strong_cut(1) == min(p.latest(k, 1) for k in range(5)) == p.barrier(1, 0, 6)
    chain = topology.Pipelines(chains=3, length=5, barriers_per_table=10)
    assert chain.strong_cut(0) == chain.latest(4) == topology.BASE_BARRIER + 5 * topology.STEP_MS


@pytest.mark.parametrize("shape", ["fan-out", "chain"])
def test_a_loaded_database_answers_the_expected_strong_cut(  # type: ignore[no-untyped-def]
        shape: str, database_url: str, client) -> None:
    """The bulk loader's pipelines, asked through HTTP, answer the cut the benchmark expects
    (the benchmark checks every answer against it), and the check refuses any other cut."""
    p = topology.load(database_url, chains=6, length=6, barriers_per_table=24, shape=shape)
    assert p.barrier_rows == sum(len(p.completed(c, k)) for c in range(6) for k in range(6))
    check = versions.cut_check(p)
    below_min_latest = 0
    for c in range(6):
        answer = client.post("/versions", json={"consistency": "strong", "tables": p.chain(c)})
        assert answer.status_code == 200, answer.text
        cuts = {v["barrier"] for v in answer.json()["versions"].values()}
        assert cuts == {p.strong_cut(c)}
        assert check(answer.content) is None
        below_min_latest += p.strong_cut(c) < min(p.latest(k, c) for k in range(6))
        wrong = json.loads(answer.content)
        first = p.chain(c)[1]
        wrong["versions"][first]["barrier"] += topology.STEP_MS
        assert check(json.dumps(wrong).encode()) is not None
    # Fan-out: the cut is below the smallest latest in two pipelines of three (the case that
    # min latest alone gets wrong); chains: never.
    assert below_min_latest == (4 if shape == "fan-out" else 0)


def test_server_cpu_is_read_to_well_under_a_clock_tick() -> None:
    """A few short requests cost the server a few milliseconds of CPU; read in 10 ms ticks
    (``/proc/PID/stat``) they could add up to none at all."""
    import subprocess
    import sys

    from benchmarks._environment import process_cpu_seconds

    burn = ("import sys, time\n"
            "while time.process_time() < 0.0437: pass\n"
            "print(time.process_time(), flush=True)\n"
            "sys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        own = float(child.stdout.readline())
        read = process_cpu_seconds(child.pid)
        assert own <= read < own + 0.004  # blocked on its stdin in between: nothing more
    finally:
        child.communicate("")
    with pytest.raises(OSError):
        process_cpu_seconds(child.pid)
