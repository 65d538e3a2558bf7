"""The README's "From Spark" commands, run as a user runs them: `examples/spark_batch_job.py`
alone, then twice against a real `metaservice serve` (the server the README's curl walk-through
ran on before, as a user following it in order has it), then `metaservice-maintenance` on what
it wrote. The tables are the server's, in its built-in catalog: the one catalog `lake` of the
README's flow, which the dashboard and DuckDB read too.

The README's bash blocks run exactly as written in a scratch directory that looks like a fresh
clone after the set-up command (``examples/`` and a ``.venv/bin`` whose ``python`` and
``metaservice-maintenance`` are this interpreter's); the only change is the server's address
(``http://127.0.0.1:8000`` becomes the test server's). Lines shown as ``# output`` under a
command must appear in what it printed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.metaservice.test_durability import ServerProcess
from tests.test_readme import (
    README,
    README_URL,
    code_blocks,
    run_walkthrough,
    sections,
    user_environment,
    walkthrough,
)

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def spark_blocks() -> list[str]:
    return code_blocks(sections(README.read_text())["From Spark"], ("bash",))


def clone_like(directory: Path) -> Path:
    """A directory laid out as a fresh clone after the README's set-up command."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "examples").symlink_to(ROOT / "examples")
    bin_dir = directory / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bin_dir / "metaservice-maintenance").write_text(
        f'#!/bin/sh\nexec {sys.executable} -c "import sys; from spark_plugin.maintenance '
        f'import main; sys.exit(main())" "$@"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return directory


def run_block(block: str, cwd: Path, url: str | None = None) -> str:
    script = "set -euo pipefail\n" + (block.replace(README_URL, url) if url else block)
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=user_environment(),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-5000:]}"
    shown = [line.strip()[1:].strip() for line in block.splitlines()
             if line.strip().startswith("#")]
    for line in shown:
        assert line in done.stdout, f"the README shows {line!r}; the run printed:\n{done.stdout}"
    return done.stdout


def test_the_example_runs_alone(tmp_path: Path) -> None:
    alone = spark_blocks()[0]
    assert "--url" not in alone and "METASERVICE_URL" not in alone
    out = run_block(alone, clone_like(tmp_path))
    assert "ingested orders 1..4" in out
    assert "at one strong cut: 4 orders, 4 of them enriched" in out


def test_run_twice_against_a_server_then_maintenance(tmp_path: Path) -> None:
    """The second run enriches only the new orders: the sink holds every order once (a full
    step replaces the sink; a resumed job appends only the new rows)."""
    from pyiceberg.catalog.rest import RestCatalog

    work = clone_like(tmp_path / "clone")
    warehouse = work / "warehouse"  # `metaservice serve` run in the clone: its default warehouse
    server = ServerProcess(f"sqlite:///{tmp_path / 'metaservice.db'}", tmp_path / "server.log",
                           env={"METASERVICE_WAREHOUSE": str(warehouse)})
    server.start()
    try:
        (tmp_path / "walkthrough").mkdir()
        run_walkthrough(walkthrough(README.read_text()), server.url, tmp_path / "walkthrough")
        out = run_block(spark_blocks()[1], work, server.url)
        assert "ingested orders 5..8" in out
        assert "at one strong cut: 8 orders, 8 of them enriched" in out
        # one catalog: what the example wrote is the server's catalog's, as DuckDB sees it
        catalog = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake")
        assert {("db", "orders"), ("db", "orders_enriched")} <= set(catalog.list_tables("db"))
        orders = catalog.load_table("db.orders").scan().to_arrow().to_pylist()
        enriched = catalog.load_table("db.orders_enriched").scan().to_arrow().to_pylist()
        assert sorted(r["order_id"] for r in orders) == list(range(1, 9))
        assert sorted(r["order_id"] for r in enriched) == list(range(1, 9))
        assert all(r["vip"] == (r["amount"] > 100) for r in enriched)
        assert len(catalog.load_table("db.orders").snapshots()) == 1  # maintenance expired one
    finally:
        server.kill()
    assert not list(warehouse.rglob("catalog.db"))  # no second catalog beside the server's
