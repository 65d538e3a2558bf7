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


def test_every_folder_and_module_of_the_server_has_its_rung() -> None:
    """The folders contract names every folder and module at the top of ``metaservice/``: a new
    one gets a rung, so that its imports are held too."""
    import re
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [folders] = [c for c in config["contracts"] if c["id"] == "folders"]
    named = {name.removeprefix("metaservice.") for rung in folders["layers"]
             for name in re.split(r"[|:\s]+", rung) if name}
    package = ROOT / "metaservice"
    present = {p.stem for p in package.iterdir()
               if (p.is_dir() and (p / "__init__.py").exists())
               or (p.suffix == ".py" and p.name != "__init__.py")}
    assert present == named, (f"not in the folders contract: {sorted(present - named)}; "
                              f"named but gone: {sorted(named - present)}")
