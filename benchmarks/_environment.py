"""What every benchmark needs around it: the machine's description, a scratch PostgreSQL schema
or SQLite file migrated to head, and a real server on a loopback port (``ServerThread`` is the
tests' too).

PostgreSQL comes from ``METASERVICE_BENCH_POSTGRES_URL`` (default: the local server, database
``test``, the same one the tests use) when a server answers there; otherwise the benchmark starts
a private cluster of its own, once per process, and removes it when the process ends
(``metaservice_soak.postgres.provide``, as the test suite does). Each benchmark works in its own
schema, dropped at the end.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

POSTGRES_URL = os.environ.get("METASERVICE_BENCH_POSTGRES_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/test")
_postgres_unavailable: str | None = None
_postgres_provided = False


def provide_postgres() -> str | None:
    """Makes ``POSTGRES_URL`` answer: the server there, else a private cluster started now (once
    per process, removed at its exit). ``None``, or why no PostgreSQL could be had."""
    global POSTGRES_URL, _postgres_unavailable, _postgres_provided
    if not _postgres_provided:
        _postgres_provided = True
        import atexit

        from metaservice_soak.postgres import ClusterError, provide

        try:
            POSTGRES_URL, started = provide(POSTGRES_URL)
        except ClusterError as exc:
            _postgres_unavailable = str(exc)
        else:
            if started is not None:
                atexit.register(started.remove)
    return _postgres_unavailable


# -- the machine ------------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return None


def postgres_version() -> str:
    unavailable = provide_postgres()
    if unavailable is not None:
        return f"unreachable ({unavailable})"
    try:
        import psycopg

        with psycopg.connect(libpq_url(POSTGRES_URL), connect_timeout=3) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            return f"PostgreSQL {row[0]}" if row else "unknown"
    except Exception as exc:  # noqa: BLE001 - only described
        return f"unreachable ({type(exc).__name__})"


def machine_description() -> dict[str, str]:
    memory = memory_gib()
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cores": str(os.cpu_count() or "?"),
        "memory": f"{memory:.1f} GiB" if memory is not None else "unknown",
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "postgresql": postgres_version(),
        "sqlite": _sqlite_version(),
        "load average": load_average(),
        "python speed": python_speed(),
    }


def python_speed() -> str:
    """A calibration: the same pure-Python loop takes ~10–15 ms on an idle recent desktop core,
    so a busy or slow machine shows here before it shows in every figure."""
    import timeit

    best = min(timeit.repeat("sum(range(1_000_000))", number=1, repeat=5))
    return f"sum(range(10**6)) in {best * 1000:.0f} ms (best of 5)"


def load_average() -> str:
    """1/5/15-minute load averages: other work on the machine skews every figure."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f}"


def _sqlite_version() -> str:
    import sqlite3

    return f"SQLite {sqlite3.sqlite_version}"


# -- databases --------------------------------------------------------------------------------

def libpq_url(sqlalchemy_url: str) -> str:
    """The same URL for psycopg/libpq tools (no ``+driver``)."""
    scheme, rest = sqlalchemy_url.split("://", 1)
    return f"{scheme.split('+', 1)[0]}://{rest}"


def schema_url(schema: str, base: str | None = None) -> str:
    base = base or POSTGRES_URL
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}"


def migrate(url: str) -> None:
    """Migrate the database at ``url`` to the head of the server code its servers will run:
    this checkout's, in this process; or, when ``PYTHONPATH`` names another checkout (as
    ``benchmarks._revisions`` sets it), that checkout's own ``metaservice db upgrade``, so that
    an older server finds the schema it knows."""
    if os.environ.get("PYTHONPATH"):
        subprocess.run([sys.executable, "-m", "metaservice", "db", "upgrade"], check=True,
                       env={**os.environ, "METASERVICE_DATABASE_URL": url},
                       stdout=subprocess.DEVNULL)
        return
    from metaservice.db.engine import build_engine
    from metaservice.db.migrate import upgrade_to_head

    engine = build_engine(url)
    try:
        upgrade_to_head(engine)
    finally:
        engine.dispose()


@contextmanager
def postgres_schema(prefix: str) -> Iterator[str]:
    """A fresh schema, migrated to head; yields its SQLAlchemy URL; dropped afterwards."""
    import psycopg

    provide_postgres()
    schema = f"bench_{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(libpq_url(POSTGRES_URL), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = schema_url(schema)
    try:
        migrate(url)
        yield url
    finally:
        with psycopg.connect(libpq_url(POSTGRES_URL), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextmanager
def sqlite_file(prefix: str) -> Iterator[str]:
    """A fresh SQLite file, migrated to head; yields its SQLAlchemy URL; deleted afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"bench_{prefix}_") as directory:
        url = f"sqlite:///{Path(directory) / 'metaservice.db'}"
        migrate(url)
        yield url


def postgres_reachable() -> bool:
    return not postgres_version().startswith("unreachable")


# -- servers ----------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerThread:
    """uvicorn serving an app in a thread of this process on a free loopback port."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        from metaservice.settings import Settings

        self.port = free_port()
        # Idle connections are kept as long as ``metaservice serve`` keeps them: with uvicorn's
        # 5 s, a client whose pooled connection idles that long while a loaded machine runs
        # other threads may send on it as the server closes it ('connection reset by peer').
        keep_alive = Settings.model_fields["keep_alive_seconds"].default
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="off", access_log=False, timeout_keep_alive=keep_alive)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@contextmanager
def server_thread(database_url: str) -> Iterator[str]:
    """The app on ``database_url`` (already migrated), served in this process; yields its URL."""
    from metaservice.app import create_app
    from metaservice.settings import Settings

    app = create_app(Settings(database_url=database_url))
    try:
        with ServerThread(app) as server:
            yield server.url
    finally:
        app.state.database.dispose()


class ServerProcess:
    """A server in a child process: its URL and the CPU time it has used."""

    def __init__(self, url: str, process: subprocess.Popen[bytes]) -> None:
        self.url, self.process = url, process

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process (all its threads) so far."""
        return process_cpu_seconds(self.process.pid)

    def sequential(self, path: str, seconds: float, *, method: str = "GET",
                   body: bytes = b"") -> tuple[list[float], float]:
        """Latencies (ms) of ``path`` asked one request after the other on one keep-alive
        connection for ``seconds`` after a one-second warm-up, and the server's CPU time (ms)
        per request answered, warm-up included."""
        from benchmarks._loadgen import sequential

        cpu = self.cpu_seconds()
        result = sequential(self.url, path, seconds, method=method, body=body)
        return result.latencies_ms, (self.cpu_seconds() - cpu) * 1000 / result.answered


def process_cpu_seconds(pid: int) -> float:
    """CPU time so far of process ``pid`` (all its threads, ended ones too), read from the
    kernel's CPU-time clock of that process, to the nanosecond: ``/proc/PID/stat`` counts in
    10 ms ticks, and a few short requests can read as none. Raises ``OSError`` once the process
    is gone."""
    return time.clock_gettime(_process_cpu_clock(pid))


def _process_cpu_clock(pid: int) -> int:
    # Linux's clock id for a process's CPU time (clock_getcpuclockid(3)): the negated pid
    # shifted past the clock type, CPUCLOCK_SCHED (2), which counts every thread's run time.
    return ((~pid) << 3) | 2


@contextmanager
def server_processes(database_url: str, *, count: int = 1,
                     extra_env: dict[str, str] | None = None) -> Iterator[list[ServerProcess]]:
    """``count`` server processes (``metaservice serve --no-migrate``, one uvicorn worker each,
    as deployed) sharing ``database_url`` (already migrated), each on its own loopback port;
    yields them once every one answers ``/readyz``."""
    import httpx

    env = {**os.environ, "METASERVICE_DATABASE_URL": database_url,
           "METASERVICE_LOG_LEVEL": "warning", "METASERVICE_AUTH": "disabled",
           "METASERVICE_HOST": "127.0.0.1", **(extra_env or {})}
    processes: list[subprocess.Popen[bytes]] = []
    logs: list[Any] = []
    urls: list[str] = []
    try:
        for _ in range(count):
            port = free_port()
            # A file, not a pipe: a full pipe would block the server. Closed in finally.
            logs.append(tempfile.TemporaryFile())  # noqa: SIM115
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "metaservice", "serve", "--no-migrate", "--port", str(port)],
                env=env, stdout=subprocess.DEVNULL, stderr=logs[-1]))
            urls.append(f"http://127.0.0.1:{port}")
        for url, process, log in zip(urls, processes, logs, strict=True):
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    err = log.read().decode(errors="replace")
                    raise RuntimeError(f"server exited with {process.returncode}: {err[-500:]}")
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server at {url} did not become ready")
                time.sleep(0.1)
        yield [ServerProcess(u, p) for u, p in zip(urls, processes, strict=True)]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for log in logs:
            log.close()
