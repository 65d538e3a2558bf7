"""Spark's Python workers without the plugin: ``register_data_source`` fails at once with
:class:`~spark_plugin.WorkerImportError` (instead of a ``ModuleNotFoundError`` deep inside a
query), while a BarrierJob, which runs no plugin code on workers, still works."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import spark_plugin as sp
from spark_plugin._workers import require_plugin_on_workers
from tests.spark_plugin.conftest import BUILTIN_CATALOG

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("worker_import_driver.py")


def test_workers_that_import_the_plugin_pass_the_check(spark):
    require_plugin_on_workers(spark)
    require_plugin_on_workers(spark)  # answered from the cache the second time


def test_workers_without_the_plugin_fail_fast_with_the_reason(builtin_url, tmp_path: Path):
    # A bare environment of the driver's own Python version (Spark refuses workers of another
    # minor version, which would be a failure for another reason): no plugin, no httpx, no
    # pyiceberg. Spark's workers still find pyspark itself (Spark puts it on their path).
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    worker_python = str(bare / "bin" / "python")
    probe = subprocess.run([worker_python, "-c", "import spark_plugin"], capture_output=True,
                           text=True, cwd=tmp_path, env={"PATH": os.environ["PATH"]})
    assert "No module named 'spark_plugin'" in probe.stderr
    prefix = f"{BUILTIN_CATALOG}.db_{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
    run = subprocess.run([sys.executable, str(DRIVER), str(ROOT), worker_python, builtin_url,
                          prefix], capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=600)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr[-3000:]
    line = next(x for x in out.splitlines() if x.startswith("register_data_source:"))
    error, python, reason = line.split(": ", 1)[1].split("|", 2)
    assert error == sp.WorkerImportError.__name__
    assert Path(python).parent == Path(worker_python).parent
    assert reason == "ModuleNotFoundError: No module named 'spark_plugin'"
    # the remedy that works, and why the builder's spark.pyspark.python did not
    message = next(x for x in out.splitlines() if x.startswith("message:"))
    assert "set PYSPARK_PYTHON to an interpreter that has it" in message
    assert f"spark.pyspark.python={sys.executable} is in this session's configuration, but " \
        "pyspark ignores it" in message
    assert "barrier_job: ok" in out
    assert f"partitioned_write: {sp.WorkerImportError.__name__}" in out
