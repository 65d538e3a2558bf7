"""The benchmark of the plugin's batch write on S3 at a tiny size, in a process of its own (its
SparkSession needs Hadoop's S3A on the classpath from its start): both writers append, every
append's rows and barrier are found on the tables afterwards, and the figures are judged against
the goal. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import plugin_s3
from tests.conftest import missing

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.spark_jvm
def test_the_benchmark_at_a_tiny_size() -> None:
    problems = plugin_s3.requirements()
    if problems:
        missing("missing: " + "; ".join(problems), required_by="METASERVICE_REQUIRE_SPARK_JVM")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "PYICEBERG_", "METASERVICE_", "PYSPARK_"))}
    command = [sys.executable, "-m", "benchmarks.plugin_s3", "--rows", "300", "--rounds", "2",
               "--warmups", "1", "--json"]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    assert measured["checked"] == 2  # both tables: rows, barriers, files on the store
    assert {side: len(s) for side, s in measured["seconds"].items()} == {"plugin": 2,
                                                                         "runtime": 2}
    assert {side: len(s) for side, s in measured["warmup_s"].items()} == {"plugin": 1,
                                                                          "runtime": 1}
    [result] = plugin_s3.results(plugin_s3.Measured(**measured))
    assert result.at_least == 0.9 and isinstance(result.met, bool) and result.ratio


def test_the_goal_is_judged_on_the_medians() -> None:
    m = plugin_s3.Measured(1000, seconds={"plugin": [2.2, 2.1, 2.3], "runtime": [2.0] * 3},
                           spark_cpu_s={"plugin": [1.0] * 3, "runtime": [1.0] * 3})
    [result] = plugin_s3.results(m)
    assert result.met is True and result.ratio == pytest.approx(2.0 / 2.2)
    m.seconds["plugin"] = [2.3] * 3
    [result] = plugin_s3.results(m)
    assert result.met is False                                                # 0.87×
