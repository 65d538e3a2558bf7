"""mypy is clean on the code held to it: the server's pure core (``metaservice/core``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TYPED = ["metaservice/core"]


@pytest.mark.parametrize("path", TYPED)
def test_mypy_is_clean(path: str) -> None:
    result = subprocess.run([sys.executable, "-m", "mypy", path], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    if result.returncode != 0:
        pytest.fail(f"mypy {path}:\n" + result.stdout + result.stderr, pytrace=False)
