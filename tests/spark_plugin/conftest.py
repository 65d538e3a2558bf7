"""Spark and Iceberg fixtures of the plugin's tests.

One local SparkSession per test session (``local[2]``, two shuffle partitions, UTC), one
temporary warehouse with a pyiceberg SQL catalog on SQLite named ``lake``, and a fresh database
(namespace) per test so tests never see each other's tables.

The catalog is also configured through ``PYICEBERG_CATALOG__LAKE__*``, as executors and tools
find it by name; pyiceberg reads that environment once, when ``pyiceberg.catalog`` is first
imported, so it is set here at import time, before any test module imports pyiceberg and before
Spark starts its Python workers (they inherit it).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import run_scratch

# In the run's scratch space (tests/conftest.py), removed at its end also by a worker whose tests
# never asked for the ``warehouse`` fixture.
WAREHOUSE = Path(tempfile.mkdtemp(prefix="spark_plugin_warehouse_", dir=run_scratch()))
CATALOG_PROPERTIES = {"uri": f"sqlite:///{WAREHOUSE / 'catalog.db'}",
                      "warehouse": f"file://{WAREHOUSE}"}
os.environ["PYICEBERG_CATALOG__LAKE__TYPE"] = "sql"
for _key, _value in CATALOG_PROPERTIES.items():
    os.environ[f"PYICEBERG_CATALOG__LAKE__{_key.upper()}"] = _value
# Spark's Python workers (Python data sources, UDFs) must run this interpreter, which has the
# plugin and its dependencies; they inherit the environment the JVM starts with.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def warehouse() -> Iterator[Path]:
    yield WAREHOUSE
    shutil.rmtree(WAREHOUSE, ignore_errors=True)


@pytest.fixture(scope="session")
def catalog(warehouse: Path):
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("lake", **CATALOG_PROPERTIES)


@pytest.fixture
def database(catalog) -> str:
    """A fresh namespace; tables of a test are named ``lake.<database>.<table>``."""
    name = f"db_{uuid.uuid4().hex[:10]}"
    catalog.create_namespace(name)
    return name


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    import spark_plugin as sp

    session = (
        SparkSession.builder.master("local[2]")
        # the plugin's JVM part: the metaservice_native source, the object-store writer
        # (engines/plugin-jvm/install.sh builds it)
        .config("spark.jars", sp.plugin_jars())
        .appName("spark_plugin-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    """A Spark standalone cluster of the module's own: a master and two workers of one core
    and 512 MiB each, their environment empty (``metaservice_soak/spark_cluster.py``); one
    cluster of the run at a time (``one_spark_cluster_at_a_time``)."""
    from metaservice_soak.spark_cluster import StandaloneCluster
    from tests.conftest import one_spark_cluster_at_a_time

    with one_spark_cluster_at_a_time(), StandaloneCluster(workers=2, cores=1,
                                                          memory="512m") as c:
        yield c
    assert not c.pids(), "processes of the cluster outlived it"


# -- the real server over loopback -------------------------------------------------------------


@pytest.fixture
def client(live_server_url: str) -> Iterator[object]:
    import spark_plugin as sp

    with sp.MetaServiceClient(live_server_url) as c:
        yield c


class CrashingTransport(httpx.BaseTransport):
    """The real HTTP transport, except that requests matching ``crash_on`` never leave the
    process (as when the process dies just before sending them)."""

    def __init__(self, crash_on: Callable[[httpx.Request], bool]) -> None:
        self._inner = httpx.HTTPTransport()
        self._crash_on = crash_on
        self.crashed: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self._crash_on(request):
            self.crashed.append(f"{request.method} {request.url.path}")
            raise httpx.ConnectError("injected crash before sending", request=request)
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


@pytest.fixture
def crashing_client(live_server_url: str) -> Iterator[Callable[..., object]]:
    """``crashing_client(predicate)``: a client whose matching requests are never sent."""
    import spark_plugin as sp

    made = []

    def make(crash_on: Callable[[httpx.Request], bool]) -> object:
        c = sp.MetaServiceClient(live_server_url, max_retries=0,
                                 transport=CrashingTransport(crash_on))
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


BUILTIN_CATALOG = "house"
"""The name of the served catalog in ``builtin_url``'s server: no pyiceberg or Spark setting
names it, so the plugin finds it as MetaService's built-in catalog."""


@pytest.fixture
def builtin_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server of its own (SQLite, the real clock) serving its Iceberg catalog ``house`` with a
    temporary warehouse."""
    from metaservice.app import create_app
    from metaservice.db.engine import build_engine
    from metaservice.db.migrate import upgrade_to_head
    from metaservice.db.session import Database
    from metaservice.settings import Settings
    from tests.conftest import ServerThread

    path = tmp_path_factory.mktemp("builtin")
    url = f"sqlite:///{path / 'metaservice.db'}"
    database = Database(build_engine(url))
    upgrade_to_head(database.engine)
    app = create_app(Settings(database_url=url, warehouse=str(path / "warehouse"),
                              catalog_name=BUILTIN_CATALOG), database=database)
    with ServerThread(app) as server:
        yield server.url
    database.dispose()
