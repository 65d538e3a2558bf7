"""The plugin on a Spark standalone cluster: a master and two workers from pyspark's own launcher
(``metaservice_soak/spark_cluster.py``), each executor its own JVM whose environment holds
nothing of the driver's: no ``METASERVICE_*``, no ``PYICEBERG_*``, no ``PYSPARK_PYTHON``, not its
working directory. What executors need travels as Spark ships it (docs/cluster.md): the server's
URL and token and the table's metadata location and storage settings inside the pickled readers
and writers of the ``metaservice`` format, the interpreter as ``PYSPARK_PYTHON`` of the driver.

The drivers (``cluster_driver.py``) run in processes of their own: one SparkContext per process,
and this one's session may be the local one of the other tests. The server (authentication
required: the token must travel too) and its built-in catalog's warehouse live in a temporary
directory every process of this machine sees; the drivers start in another.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import spark_plugin as sp
from metaservice_soak.spark_cluster import StandaloneCluster, spark_home
from spark_plugin import _iceberg as ice

pytestmark = pytest.mark.spark

DRIVER = Path(__file__).with_name("cluster_driver.py")
CATALOG = "house"
TOKEN = "cluster-admin-" + uuid.uuid4().hex
FORBIDDEN = ("METASERVICE_", "PYICEBERG_", "PYSPARK_PYTHON")


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from pydantic import SecretStr

    from metaservice.app import create_app
    from metaservice.db.engine import build_engine
    from metaservice.db.migrate import upgrade_to_head
    from metaservice.db.session import Database
    from metaservice.settings import Settings
    from tests.conftest import ServerThread

    path = tmp_path_factory.mktemp("cluster-server")
    url = f"sqlite:///{path / 'metaservice.db'}"
    database = Database(build_engine(url))
    upgrade_to_head(database.engine)
    app = create_app(Settings(database_url=url, warehouse=str(path / "warehouse"),
                              catalog_name=CATALOG, auth="required",
                              admin_token=SecretStr(TOKEN)), database=database)
    with ServerThread(app) as server:
        yield server.url
    database.dispose()


@pytest.fixture
def client(server_url: str) -> Iterator[sp.MetaServiceClient]:
    with sp.MetaServiceClient(server_url, token=TOKEN) as c:
        yield c


def driver_env(server_url: str, **extra: str) -> dict[str, str]:
    """The driver's environment: this one without the test session's pyiceberg catalog and
    interpreter settings, with the server's URL and token."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(FORBIDDEN) and k not in ("PYTHONPATH", "SPARK_HOME")}
    return {**env, "METASERVICE_URL": server_url, "METASERVICE_TOKEN": TOKEN,
            "SPARK_LOCAL_IP": "127.0.0.1", **extra}


def run_driver(command: list[str], env: dict[str, str], cwd: Path,
               result_file: Path) -> dict[str, Any]:
    run = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    result: dict[str, Any] = json.loads(result_file.read_text())
    return result


def check_ran_on_the_cluster(evidence: dict[str, Any], cluster: StandaloneCluster) -> None:
    """Every task ran in an executor JVM of the cluster (two distinct ones), whose environment
    and Python workers' hold nothing of the driver's."""
    assert evidence["master"] == cluster.master_url
    assert evidence["block_managers"] == 3  # the driver and two executors
    assert len(evidence["executor_ids"]) == 2
    tasks = evidence["tasks"]
    assert {t["main"] for t in tasks} == {
        "org.apache.spark.executor.CoarseGrainedExecutorBackend"}
    assert len({t["java_pid"] for t in tasks}) == 2
    assert {t["executor_id"] for t in tasks} == set(evidence["executor_ids"])
    assert len({t["java_parent"] for t in tasks}) == 2
    for task in tasks:
        assert task["java_parent"] in cluster.worker_pids()  # forked by a worker
        leaked = [k for k in task["jvm_env"] + task["python_env"] if k.startswith(FORBIDDEN)]
        assert leaked == [], f"executor {task['executor_id']} sees {leaked}"
        assert Path(task["cwd"]).is_relative_to(cluster.root)
        assert task["cwd"] != evidence["driver_cwd"]
        assert task["python"] == sys.executable or Path(task["python"]).parent == Path(
            sys.executable).parent


def test_the_readme_batch_job_runs_on_the_cluster(cluster, server_url, client, tmp_path):
    """``PYSPARK_PYTHON`` in the driver's environment names the plugin's interpreter; the
    README's batch example ingests and enriches through the built-in catalog."""
    database = f"db_{uuid.uuid4().hex[:8]}"
    prefix = f"{CATALOG}.{database}"
    result_file = tmp_path / "result.json"
    (tmp_path / "driver").mkdir()
    result = run_driver([sys.executable, str(DRIVER), "batch", cluster.master_url, prefix,
                         str(result_file)],
                        driver_env(server_url, PYSPARK_PYTHON=sys.executable),
                        tmp_path / "driver", result_file)
    check_ran_on_the_cluster(result["evidence"], cluster)

    batch = result["batch"]
    [step] = batch["steps"]
    assert step["barrier"] == batch["ingested_barrier"]
    sink = f"{prefix}.orders_enriched"
    rows = ice.load_table(sink, client=client).scan().to_arrow().sort_by("order_id").to_pylist()
    assert [(r["order_id"], r["vip"]) for r in rows] == [(1, False), (2, True), (3, True),
                                                        (4, True)]
    recorded = client.table_barriers(sink)["barriers"]
    assert [(b["barrier"], b["snapshot_id"], b.get("writer_job")) for b in recorded] == [
        (step["barrier"], step["snapshots"][sink], "enrich")]
    assert client.get_job("enrich")["state"] == "terminated"


def ingest(client: sp.MetaServiceClient, table: str, ids: list[int], batch: int,
           barrier: int) -> None:
    """One root snapshot at ``barrier`` through the built-in catalog (recorded by the commit)."""
    import pyarrow as pa
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    tbl = ice.load_table(table, client=client)
    data = pa.Table.from_pydict({"id": ids, "amount": [x * 7 % 100 for x in ids],
                                 "batch": [batch] * len(ids)},
                                schema=schema_to_pyarrow(tbl.schema(), include_field_ids=False))
    ice.commit_sink(tbl, job="cluster-ingest", barrier=barrier, root=True,
                    data_files=ice.data_files_from_arrow(tbl, data))


def test_a_streaming_query_runs_on_the_cluster(cluster, server_url, client, tmp_path):
    """``spark-submit --conf spark.pyspark.python`` names the plugin's interpreter; the query
    copies three barriers of the source through the ``metaservice`` source and sink, reading
    and writing on the executors, each row once."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    database = f"db_{uuid.uuid4().hex[:8]}"
    prefix = f"{CATALOG}.{database}"
    catalog = ice.find_catalog(CATALOG, conf={}, url=server_url, token=TOKEN).load()
    catalog.create_namespace(database)
    schema = Schema(*[NestedField(i + 1, n, LongType(), required=False)
                      for i, n in enumerate(("id", "amount", "batch"))])
    for table in ("events", "events_out"):
        catalog.create_table((database, table), schema=schema)
    source, sink = f"{prefix}.events", f"{prefix}.events_out"
    first = int(time.time() * 1000) - 60_000
    barriers = [first + 1000 * i for i in range(3)]
    ids = [[10 * i + k for k in range(2 + i % 2)] for i in range(3)]
    for i, barrier in enumerate(barriers):
        ingest(client, source, ids[i], i, barrier)

    result_file = tmp_path / "result.json"
    checkpoint = tmp_path / "checkpoint"
    (tmp_path / "driver").mkdir()
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url,
               "--conf", f"spark.pyspark.python={sys.executable}",
               str(DRIVER), "stream", cluster.master_url, prefix, str(result_file),
               str(checkpoint)]
    result = run_driver(command, driver_env(server_url), tmp_path / "driver", result_file)
    check_ran_on_the_cluster(result["evidence"], cluster)

    stream = result["stream"]
    assert stream["failure"] is None and stream["finished"], stream
    rows = ice.load_table(sink, client=client).scan().to_arrow().to_pylist()
    expected = sorted((x, x * 7 % 100 * 2 + 1, i) for i, group in enumerate(ids) for x in group)
    assert sorted((r["id"], r["amount"], r["batch"]) for r in rows) == expected
    recorded = client.table_barriers(sink)["barriers"]
    assert recorded, "the sink recorded no barrier"
    assert recorded[0]["barrier"] == barriers[-1]
    assert {b["writer_job"] for b in recorded} == {stream["job"]}
    assert {b["barrier"] for b in recorded} <= set(barriers)
    assert stream["job"] in stream["unregistered"]
    assert client.get_job(stream["job"])["state"] == "terminated"
