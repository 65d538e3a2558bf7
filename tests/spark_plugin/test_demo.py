"""``metaservice demo`` end to end, as a user runs it (a short ``--duration``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark


def test_demo_runs_the_pipeline_and_every_strong_read_holds_the_invariant(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYICEBERG_", "METASERVICE_"))}
    done = subprocess.run(
        [sys.executable, "-m", "metaservice", "demo", "--duration", "8", "--report-every", "3",
         "--port", "0", "--dir", str(tmp_path / "demo")],
        env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "enrich-orders committed barrier" in out
    assert "revenue-by-segment committed barrier" in out
    assert "invariant holds" in out and "BROKEN" not in out
    reads = re.search(r"(\d+) strong reads, invariant held in (\d+) of them", out)
    assert reads is not None and int(reads.group(1)) >= 1
    assert reads.group(1) == reads.group(2)
    assert "bottleneck:" in out
