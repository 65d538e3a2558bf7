"""The order the parallel run hands files out in (tests/conftest.py, ``COSTLIEST_FILES``) names
files that exist, each once, and is the order the run collects them in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import COSTLIEST_FILES

ROOT = Path(__file__).resolve().parent.parent


def test_the_costliest_files_exist_each_once() -> None:
    assert len(set(COSTLIEST_FILES)) == len(COSTLIEST_FILES)
    missing = [path for path in COSTLIEST_FILES if not (ROOT / path).is_file()]
    assert not missing, f"COSTLIEST_FILES names files that are gone: {missing}"


def test_the_run_collects_the_costliest_files_first() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "--backend", "sqlite", "tests/test_docs_citations.py", *reversed(COSTLIEST_FILES[:3])],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    files = list(dict.fromkeys(line.split("::", 1)[0] for line in listed.stdout.splitlines()
                               if "::" in line))
    assert files == [*COSTLIEST_FILES[:3], "tests/test_docs_citations.py"], listed.stdout[-3000:]
