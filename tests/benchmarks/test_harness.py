"""The benchmark harness itself: the generated section of docs/benchmarks.md is rewritten one
block at a time, prose is kept; the load generator counts what it is told to check."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.__main__ import Outcome, update_doc
from benchmarks._loadgen import run_load, sequential
from benchmarks._report import Result
from tests.conftest import ServerThread

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
