"""The server's layers (docs/architecture.md, "Server layout") hold: ``lint-imports`` checks
the contracts of pyproject.toml's ``[tool.importlinter]`` — the layers from the wire down to the
base modules, the service stack, repositories that import no service or endpoint, a pure core,
no Spark plugin in the server — and this test fails with its report when one is broken."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    if not lint_imports.exists():
        pytest.fail(f"{lint_imports} is missing: install the dev extra (pip install -e '.[dev]')")
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    if result.returncode != 0:
        pytest.fail("lint-imports found imports against the layers:\n"
                    + result.stdout + result.stderr, pytrace=False)
    assert "0 broken" in result.stdout
