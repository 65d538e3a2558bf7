"""mypy, at the version the ``dev`` extra pins, finds no error in the typed code listed here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# mypy over three packages takes a minute of CPU from a cold cache.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent

# What mypy checks (with pyproject.toml's [tool.mypy] settings): one entry per package or module.
TYPED_PATHS = [
    "metaservice/core",
    "spark_plugin",
    "metaservice_demo",
    "metaservice_soak",
    "metaservice_names",
]


def _pinned_mypy() -> str:
    pyproject = (ROOT / "pyproject.toml").read_text()
    pins = [line.strip().strip('",') for line in pyproject.splitlines()
            if line.strip().startswith('"mypy==')]
    assert len(pins) == 1, "the dev extra pins mypy to one exact version"
    return pins[0].split("==", 1)[1]


def test_mypy_is_the_pinned_version() -> None:
    from importlib.metadata import version

    assert version("mypy") == _pinned_mypy()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for the module's runs (the packages share their imports)."""
    return tmp_path_factory.mktemp("mypy-cache")


@pytest.mark.parametrize("path", TYPED_PATHS)
def test_mypy_finds_no_error(path: str, cache_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(cache_dir), path],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
