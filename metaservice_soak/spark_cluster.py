"""A Spark standalone cluster on this machine: one master and N workers, from pyspark's own
launcher (``$SPARK_HOME/bin/spark-class``, ``SPARK_HOME`` being the pip-installed pyspark).

    with StandaloneCluster(workers=2) as cluster:
        spark = SparkSession.builder.master(cluster.master_url)...

The daemons come from this interpreter's pyspark, or from the Spark distribution ``spark_home``
names (another virtualenv's pyspark package directory: the Spark of another route, such as
``.venv-spark41``'s).

Everything binds to 127.0.0.1 on free ports. Each daemon is its own JVM in its own process
group, started with a scrubbed environment (``PATH``, ``JAVA_HOME``, ``HOME`` and the
``SPARK_*`` it needs, nothing else: no ``METASERVICE_*``, no ``PYICEBERG_*``, no
``PYSPARK_PYTHON``), in a directory of its own under a temporary root (never the caller's
working directory). A worker offers ``cores`` cores and ``memory`` of memory; its executors are
JVMs it forks (one per application with the default ``spark.executor.cores``), with the
environment the worker has plus the application's ``spark.executorEnv.*``.

:meth:`StandaloneCluster.stop` (also on ``__exit__`` and at interpreter exit) stops the
daemons with SIGTERM, then SIGKILLs their process groups, executors and Python workers
included, and removes the temporary root: no JVM outlives the cluster.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
# The JVM options of the cluster's master, workers and executors: a pipeline of small batches
# on a few cores, for which the client compiler alone and a serial collector cost less CPU than
# the default tiers and parallel collector.
SPARK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The pip-installed pyspark package: it is a Spark distribution (``bin/``, ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java_home() -> str:
    """``$JAVA_HOME``, else the JDK of the ``java`` on ``PATH``."""
    configured = os.environ.get("JAVA_HOME")
    if configured:
        return configured
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("no java on PATH and no JAVA_HOME: Spark needs Java 17 or 21")
    return str(Path(java).resolve().parent.parent)


DRIVER_SETTINGS = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.executor.extraJavaOptions": SPARK_JVM_OPTIONS,
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}
"""The settings of a driver on this machine talking to the cluster: loopback only, 512 MiB for
the driver and each executor of one core, two partitions, no UI, and executors that compile
with the client compiler alone and collect serially (small batches: less CPU for the same work,
as ``SPARK_JVM_OPTIONS`` for the daemons)."""


def driver_builder(master: str, app: str) -> Any:
    """A ``SparkSession`` builder for a driver on this machine talking to ``master``, with
    ``DRIVER_SETTINGS``."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app)
    for key, value in DRIVER_SETTINGS.items():
        builder = builder.config(key, value)
    return builder


_this_spark_home = spark_home  # the default of StandaloneCluster's parameter of that name


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class _Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


class StandaloneCluster:
    """A master and ``workers`` workers; see the module docstring."""

    def __init__(self, workers: int = 2, *, cores: int = 1, memory: str = "512m",
                 daemon_memory: str = "256m", startup_timeout: float = 120.0,
                 spark_home: Path | None = None) -> None:
        self.workers = workers
        self.spark_home = spark_home if spark_home is not None else _this_spark_home()
        self.cores = cores
        self.memory = memory
        self.daemon_memory = daemon_memory
        self.startup_timeout = startup_timeout
        self.root = Path(tempfile.mkdtemp(prefix="spark-standalone-"))
        self.master_port = free_port()
        self.master_ui_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.master_port}"
        self.master_ui_url = f"http://127.0.0.1:{self.master_ui_port}"
        self._daemons: list[_Daemon] = []
        self._stopped = False

    # -- environment ----------------------------------------------------------------------

    def daemon_env(self, name: str) -> dict[str, str]:
        """The whole environment of one daemon (``env -i`` plus these keys)."""
        home = self.root / name
        java = java_home()
        env = {
            "PATH": f"{java}/bin:/usr/local/bin:/usr/bin:/bin",
            "JAVA_HOME": java,
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "SPARK_HOME": str(self.spark_home),
            "SPARK_CONF_DIR": str(self.root / "conf"),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(home / "local"),
            "SPARK_LOG_DIR": str(home / "logs"),
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "SPARK_DAEMON_JAVA_OPTS": SPARK_JVM_OPTIONS,
            "SPARK_NO_DAEMONIZE": "1",
        }
        return env

    # -- life cycle -----------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> _Daemon:
        home = self.root / name
        (home / "local").mkdir(parents=True, exist_ok=True)
        (home / "logs").mkdir(parents=True, exist_ok=True)
        log = home / "daemon.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(self.spark_home / "bin" / "spark-class"), *args],
                env=self.daemon_env(name), cwd=home, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        daemon = _Daemon(name, process, log)
        self._daemons.append(daemon)
        return daemon

    def start(self) -> StandaloneCluster:
        (self.root / "conf").mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            self._spawn("master", [MASTER_CLASS, "--host", "127.0.0.1",
                                   "--port", str(self.master_port),
                                   "--webui-port", str(self.master_ui_port)])
            for i in range(self.workers):
                name = f"worker-{i}"
                work_dir = self.root / name / "work"
                work_dir.mkdir(parents=True, exist_ok=True)
                self._spawn(name, [WORKER_CLASS, "--host", "127.0.0.1",
                                   "--port", str(free_port()),
                                   "--webui-port", str(free_port()),
                                   "--cores", str(self.cores), "--memory", self.memory,
                                   "--work-dir", str(work_dir), self.master_url])
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last: Any = None
        while time.monotonic() < deadline:
            for daemon in self._daemons:
                if daemon.process.poll() is not None:
                    raise RuntimeError(f"spark {daemon.name} exited with "
                                       f"{daemon.process.returncode}:\n{self.log_tail(daemon)}")
            try:
                last = self.status()
                if len([w for w in last.get("workers", [])
                        if w.get("state") == "ALIVE"]) >= self.workers:
                    return
            except (httpx.HTTPError, ValueError) as exc:
                last = exc
            time.sleep(0.5)
        raise RuntimeError(f"the standalone cluster was not ready in {self.startup_timeout}s "
                           f"(last status: {last!r}):\n"
                           + "\n".join(self.log_tail(d) for d in self._daemons))

    def status(self) -> dict[str, Any]:
        """The master's JSON status: workers, active and completed applications."""
        answer = httpx.get(f"{self.master_ui_url}/json/", timeout=5.0)
        answer.raise_for_status()
        data: dict[str, Any] = answer.json()
        return data

    def worker_pids(self) -> list[int]:
        """The workers' JVMs (``spark-class`` execs ``java``): the parents of their
        executors."""
        return [d.process.pid for d in self._daemons if d.name.startswith("worker-")]

    def pids(self) -> list[int]:
        """Every live process of the cluster: the daemons, their executors and Python
        workers (members of the daemons' process groups; zombies excluded)."""
        groups = {d.process.pid for d in self._daemons}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                state, _ppid, pgid = stat[stat.rindex(")") + 2:].split()[:3]
                if int(pgid) in groups and state != "Z":  # a zombie is dead, only not reaped
                    found.append(int(entry.name))
        return sorted(found)

    def log_tail(self, daemon: _Daemon, lines: int = 30) -> str:
        try:
            text = daemon.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            text = []
        return f"--- {daemon.name} ---\n" + "\n".join(text)

    def stop(self) -> None:
        """Stop every daemon (SIGTERM, then SIGKILL to its whole process group) and remove the
        temporary root. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for daemon in reversed(self._daemons):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for daemon in self._daemons:
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        for daemon in self._daemons:
            # executors and Python workers left in the group, or a daemon that did not stop
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.process.wait(timeout=10)
        deadline = time.monotonic() + 10
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.1)  # orphans killed above, not reaped by init yet
        shutil.rmtree(self.root, ignore_errors=True)
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
