"""The README's Spark 4.1 command line, as written: ``spark-sql`` of ``.venv-spark41`` on the
Spark 4.1 route's standalone cluster (``spark41_cluster``), Iceberg's runtime on ``--jars``, the
catalog's settings on ``--conf``, and the job's step (``step.sql``, the README's SQL block) at
the barrier and snapshot the service handed the job. docs/engines.md shows the same two blocks.

What the test changes in the command: the server's and the master's addresses (the README's
``127.0.0.1:8000`` and ``:7077`` become the test's), and the relative paths into the checkout
become absolute (the command runs in a temporary directory, where ``spark-sql`` leaves its
``metastore_db``). This machine's small executors (512 MiB, one core) come from a
``spark-defaults.conf`` of the test's, as a cluster's operator sets them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from metaservice_soak.spark_cluster import DRIVER_SETTINGS, StandaloneCluster
from tests.conftest import ServerThread
from tests.metaservice.catalog.test_pyiceberg import barriers
from tests.metaservice.jobs.test_jobs import plan
from tests.test_readme import README, README_URL, SPARK35_SECTION, code_blocks, sections

pytestmark = [pytest.mark.spark_jvm, pytest.mark.backends("postgresql")]

ROOT = Path(__file__).resolve().parents[3]
ENGINES = ROOT / "docs" / "engines.md"
README_MASTER = "spark://127.0.0.1:7077"
ROWS = pa.schema([pa.field("id", pa.int64()), pa.field("amount", pa.int64())])


def documented() -> tuple[str, str]:
    """The README's ``spark-sql`` command (a console block) and its ``step.sql``."""
    section = sections(README.read_text())[SPARK35_SECTION]
    [console] = code_blocks(section, ("console",))
    [step] = [b for b in code_blocks(section, ("sql",)) if b.startswith("-- step.sql")]
    return console, step


def test_the_engines_page_shows_the_readmes_spark_sql_command() -> None:
    console, step = documented()
    engines = ENGINES.read_text()
    assert console in code_blocks(engines, ("console",))
    assert step in code_blocks(engines, ("sql",))


def test_the_readmes_spark_sql_command_runs_a_jobs_step_on_the_cluster(
        spark41_cluster: StandaloneCluster, server: ServerThread, catalog: RestCatalog,
        client: httpx.Client, tmp_path: Path) -> None:
    console, step = documented()
    catalog.create_namespace("shop")
    orders = catalog.create_table("shop.orders", schema=ROWS)
    catalog.create_table("shop.totals", schema=ROWS)
    plan(client, "shop-totals", ["lake.shop.orders"], ["lake.shop.totals"])
    orders.append(pa.table({"id": [1, 2], "amount": [10, 20]}, schema=ROWS),
                  snapshot_properties={"metaservice.barrier": "100"})
    answer = client.post("/jobs/shop-totals/start", json={"from": "latest"}).json()
    assert answer["barrier"] == 100, answer

    (tmp_path / "step.sql").write_text(step)
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "".join(f"{key} {value}\n" for key, value in DRIVER_SETTINGS.items()))
    commands = [line.removeprefix("$ ") for line in console.replace("\\\n", " ").splitlines()]
    assert all(line.startswith(("source ", "spark-sql ")) for line in commands), commands
    script = "\n".join(commands)
    script = script.replace(README_URL, server.url).replace(README_MASTER,
                                                            spark41_cluster.master_url)
    script = re.sub(r"(?<=[ =])\.(venv-spark41|cache)/", lambda m: f"{ROOT}/.{m.group(1)}/",
                    script)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    # a user who runs the plugin too may have its interpreter in PYSPARK_PYTHON: activate's
    # SPARK_HOME keeps spark-sql on the route's Spark (without it, Spark 4.2 met the 4.1 runtime)
    env["PYSPARK_PYTHON"] = sys.executable
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_CONF_DIR=str(conf), B=str(answer["barrier"]),
               S=str(answer["snapshots"]["lake.shop.orders"]))
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    # the error's own lines, not only the end of its stack trace
    errors = [line for line in done.stderr.splitlines()
              if line and not line.startswith(("\tat ", "\t... "))]
    assert done.returncode == 0, (f"stdout:\n{done.stdout}\nstderr without stack frames:\n"
                                  + "\n".join(errors)[-6000:])
    assert any(a["name"].startswith("SparkSQL") for a in spark41_cluster.status()[
        "completedapps"]), "spark-sql ran on the cluster"

    totals = catalog.load_table("shop.totals")
    assert sorted(totals.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "amount": 10}, {"id": 2, "amount": 20}]
    head = totals.current_snapshot()
    assert head is not None
    assert barriers(client, "lake.shop.totals") == [(100, head.snapshot_id, "shop-totals")]
    assert client.get("/jobs/shop-totals").json()["last_committed_barrier"] == 100
