"""A private PostgreSQL cluster for the soak: ``initdb`` into a directory of its own, served on a
free loopback port, crashed with ``pg_ctl stop -m immediate`` and started again.

    cluster = PrivateCluster(Path("/tmp/soak/postgres")).create()
    cluster.start()
    url = cluster.url          # postgresql+psycopg://postgres@127.0.0.1:PORT/soak
    cluster.crash()            # every backend killed at once, no shutdown checkpoint
    cluster.start()            # crash recovery replays the WAL
    cluster.stop()

The cluster's binaries are the first ``initdb``/``pg_ctl`` on ``PATH``, else the newest of
Debian's ``/usr/lib/postgresql/*/bin`` (or those in ``bin_dir``). It
listens on 127.0.0.1 only, on a port of its own, with its socket in its own directory: the
machine's shared server (5432) is never touched. ``initdb`` refuses to run as root, so when the
harness runs as root the cluster runs as the ``postgres`` OS user (``runuser -u postgres --``):
its files then live in a directory of that user's in the system's temporary directory (a
root-only directory such as pytest's ``tmp_path`` is out of its reach), and ``root`` is a
symbolic link to it. Authentication is ``trust`` on loopback, as a throw-away cluster's is.

The test suite and the benchmarks get their PostgreSQL from ``provide``: the server at the URL
they are given when one answers there, else a private cluster started for them (and removed
when they end)::

    url, started = provide("postgresql+psycopg://postgres@127.0.0.1:5432/test")
    ...
    if started is not None:
        started.remove()
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from metaservice_soak.spark_cluster import free_port

DATABASE = "soak"
OS_USER_WHEN_ROOT = "postgres"


class ClusterError(RuntimeError):
    """A PostgreSQL tool failed; the message carries its output."""


def server_binary(name: str, bin_dir: Path | None = None) -> str:
    """The path of one of PostgreSQL's server programs (``initdb``, ``pg_ctl``, ``createdb``).

    Raises:
        ClusterError: it is not installed.
    """
    if bin_dir is not None:
        return str(bin_dir / name)
    found = shutil.which(name) or shutil.which(name, path="/usr/local/bin")
    if found is None:
        # Debian's packages keep the server programs off PATH, one directory per major version
        debian = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"),
                        key=lambda path: int(path.parts[-3]) if path.parts[-3].isdigit() else 0)
        if debian:
            return str(debian[-1])
        raise ClusterError(f"{name} not found on PATH nor in /usr/lib/postgresql/*/bin: install "
                           "PostgreSQL's server (Debian's postgresql package; "
                           "bash .ci/install-system-packages.sh does)")
    return found


class PrivateCluster:
    """One private PostgreSQL cluster in ``root`` (see the module docstring)."""

    def __init__(self, root: Path, *, port: int | None = None, bin_dir: Path | None = None,
                 database: str = DATABASE) -> None:
        self.os_user = OS_USER_WHEN_ROOT if os.geteuid() == 0 else None
        self.root = root
        self.home = (Path(tempfile.mkdtemp(prefix="metaservice-soak-postgres-"))
                     if self.os_user is not None else root)
        self.data = self.home / "data"
        self.socket_dir = self.home / "socket"
        self.log = self.home / "postgres.log"
        self.port = port or free_port()
        self.bin_dir = bin_dir
        self.database = database

    # -- what clients use -------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the cluster's database."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{self.database}"

    @property
    def libpq_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.database}"

    # -- tools ------------------------------------------------------------------------------

    def _tool(self, name: str) -> str:
        return server_binary(name, self.bin_dir)

    def _run(self, *args: str, timeout: float = 120) -> str:
        command = [self._tool(args[0]), *args[1:]]
        if self.os_user is not None:
            command = ["runuser", "-u", self.os_user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              cwd="/", check=False)
        if done.returncode != 0:
            raise ClusterError(f"{' '.join(args[:2])} exited {done.returncode}: "
                               f"{(done.stderr or done.stdout).strip()[-2000:]}")
        return done.stdout

    def _own(self, path: Path) -> None:
        if self.os_user is not None:
            user = pwd.getpwnam(self.os_user)
            os.chown(path, user.pw_uid, user.pw_gid)

    # -- life cycle -------------------------------------------------------------------------

    def create(self) -> PrivateCluster:
        """``initdb`` (trust authentication, user ``postgres``), then the cluster's database."""
        if self.home != self.root:
            self.root.parent.mkdir(parents=True, exist_ok=True)
            self.root.symlink_to(self.home, target_is_directory=True)
        self.home.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        self.log.touch()
        for path in (self.home, self.socket_dir, self.log):
            self._own(path)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions")
        self.start()
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                  self.database)
        return self

    def start(self, timeout: float = 60) -> None:
        """Start the server (after a crash, PostgreSQL's own recovery replays the WAL) and wait
        until it accepts connections."""
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 "
                   f"-c unix_socket_directories={self.socket_dir} -c max_connections=100")
        self._run("pg_ctl", "start", "-D", str(self.data), "-l", str(self.log), "-w",
                  "-t", str(int(timeout)), "-o", options, timeout=timeout + 10)
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres",
                                     connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise ClusterError(f"PostgreSQL on port {self.port} not ready: {exc}") from exc
                time.sleep(0.2)

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``: every server process quits at once, without a
        checkpoint, as in a power loss of the database's host (the OS's caches survive)."""
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w")

    def stop(self) -> None:
        """A clean shutdown (``-m fast``); nothing when the server is not running."""
        if self.running():
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w")

    def running(self) -> bool:
        if not self.data.is_dir():
            return False
        command = [self._tool("pg_ctl"), "status", "-D", str(self.data)]
        if self.os_user is not None:
            command = ["runuser", "-u", self.os_user, "--", *command]
        return subprocess.run(command, capture_output=True, check=False).returncode == 0

    def remove(self) -> None:
        """Stop the server and delete its directory."""
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)
        if self.root.is_symlink():
            self.root.unlink()


# -- a PostgreSQL for the test suite and the benchmarks ----------------------------------------

def answers(url: str, timeout: float = 3) -> str | None:
    """``None`` when a PostgreSQL accepts a connection at the SQLAlchemy or libpq ``url``, else
    why not (the driver's message, one line)."""
    import psycopg

    scheme, rest = url.split("://", 1)
    try:
        with psycopg.connect(f"{scheme.split('+', 1)[0]}://{rest}",
                             connect_timeout=max(1, int(timeout))) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return " ".join(str(exc).split()) or type(exc).__name__
    return None


def provide(url: str, *, root: Path | None = None) -> tuple[str, PrivateCluster | None]:
    """A PostgreSQL to run against: ``url`` itself when a server answers there (nothing is
    started), else a private cluster started in ``root`` (a new temporary directory by default)
    with a database of the same name as ``url``'s; its URL and the cluster, which the caller
    removes when done (``PrivateCluster.remove``).

    Raises:
        ClusterError: nothing answers at ``url`` and no cluster could be started (the server's
            binaries are missing, or initdb or the server failed); the message says both.
    """
    unreachable = answers(url)
    if unreachable is None:
        return url, None
    database = url.rsplit("/", 1)[-1].split("?", 1)[0] or DATABASE
    import uuid

    where = root or Path(tempfile.gettempdir()) / f"metaservice-postgres-{uuid.uuid4().hex[:12]}"
    cluster = PrivateCluster(where, database=database)
    try:
        cluster.create()
    except (ClusterError, OSError, subprocess.SubprocessError) as exc:
        cluster.remove()
        raise ClusterError(f"no PostgreSQL answers at {url} ({unreachable}) and none could be "
                           f"started: {exc}") from exc
    return cluster.url, cluster
