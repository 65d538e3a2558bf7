"""The streaming benchmark at a tiny size, in a process of its own (it starts and stops its own
SparkSession): the sink's rounds and both sources' barriers all ran, every barrier a source
was given was read, and the figures are judged against their goals. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, pathlib, sys
from benchmarks import streaming
results = streaming._run(pathlib.Path(sys.argv[1]), rows=20_000, batches=5, rounds=1)
print(json.dumps([{"figure": r.figure, "ratio": r.ratio, "met": r.met} for r in results]))
"""


@pytest.mark.spark
def test_the_streaming_benchmark_at_a_tiny_size(tmp_path: Path) -> None:
    # the environment of a user's shell: none of the settings other tests put in this process's
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("METASERVICE_", "PYICEBERG_"))}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT,
                          env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    results = {r["figure"]: r for r in json.loads(done.stdout.strip().splitlines()[-1])}
    # 5 files of 4,000 rows, one file a barrier: the first barrier apart, then four more
    for source in ("metaservice_native", "metaservice"):
        steady = results[f"streaming source {source}, 16,000 rows in 4 barriers after the first"]
        first = results[f"streaming source {source}, a query's first barrier (4,000 rows)"]
        assert isinstance(steady["met"], bool) and steady["ratio"] > 0
        assert first["met"] is None and first["ratio"] > 0
    sink = results["streaming sink throughput, 20,000 rows in 5 barriers"]
    assert isinstance(sink["met"], bool) and sink["ratio"] > 0
