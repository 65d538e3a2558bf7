"""The soak's MetaService: ``metaservice serve`` processes on one database, as an operator runs
them — on PostgreSQL, ``count`` replicas behind haproxy with ``deploy/haproxy/haproxy.cfg`` (the
documented configuration, run as it is); on SQLite, the single server.

    servers = ServerPool(database_url, warehouse, logs, replicas=2, balancer=True)
    servers.prepare()          # migrate, create the soak's writer token
    servers.start()
    servers.url                # haproxy's address (the single server's without a balancer)
    servers.kill(0)            # SIGKILL, as a crashed host's process dies
    servers.restart(0)         # on the same port: haproxy's health check takes it back
    servers.stop()

haproxy's configuration is the repository's ``deploy/haproxy/haproxy.cfg``: the soak runs from a
checkout, as the benchmarks do.

Servers start with ``--no-migrate`` (the pool migrates once in :meth:`prepare`), so one can be
restarted while the database is down: it serves 503 ``database_unavailable`` until the
database is back, as a replica that survived does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from metaservice_soak.spark_cluster import free_port

HAPROXY_CONFIG = Path(__file__).resolve().parent.parent / "deploy" / "haproxy" / "haproxy.cfg"
TOKEN_NAME = "soak"


class ServerError(RuntimeError):
    """A server, or haproxy, did not start; the message carries its log's tail."""


def haproxy_command() -> str | None:
    """haproxy's path (Debian puts it in /usr/sbin, not on every user's PATH), if installed."""
    return shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_until_answering(url: str, process: subprocess.Popen[bytes], log: Path,
                         timeout: float = 60.0) -> None:
    """Wait until ``url`` answers 200 (``process`` must stay alive meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if process.poll() is not None:
            raise ServerError(f"{url}: the process exited with {process.returncode}:\n"
                              f"{log_tail(log)}")
        if time.monotonic() > deadline:
            raise ServerError(f"{url} did not answer within {timeout:.0f} s:\n{log_tail(log)}")
        time.sleep(0.1)


@dataclass
class Server:
    """One ``metaservice serve`` process on a fixed port."""

    index: int
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class ServerPool:
    """``replicas`` servers on ``database_url``, behind haproxy when ``balancer`` (see the
    module docstring). Every log goes to ``logs`` (appended across restarts)."""

    def __init__(self, database_url: str, warehouse: Path | str, logs: Path, *,
                 replicas: int = 2, balancer: bool = True, python: str = sys.executable,
                 settings: dict[str, str] | None = None) -> None:
        if not balancer and replicas != 1:
            raise ValueError("without a balancer there is one server")
        self.database_url = database_url
        self.warehouse = warehouse
        self.settings = settings or {}  # more of the servers' environment (an object store's)
        self.logs = logs
        self.balancer = balancer
        self.python = python
        self.servers = [Server(i, free_port(), logs / f"server-{i + 1}.log")
                        for i in range(replicas)]
        self.balancer_port = free_port() if balancer else None
        self.balancer_log = logs / "haproxy.log"
        self.balancer_process: subprocess.Popen[bytes] | None = None
        self.token: str | None = None

    # -- configuration ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Where clients go: haproxy, or the single server."""
        if self.balancer_port is not None:
            return f"http://127.0.0.1:{self.balancer_port}"
        return self.servers[0].url

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("METASERVICE_")}
        env.update({
            "METASERVICE_DATABASE_URL": self.database_url,
            "METASERVICE_WAREHOUSE": str(self.warehouse),
            "METASERVICE_AUTH": "required",
            "METASERVICE_HOST": "127.0.0.1",
            "METASERVICE_PUBLIC_URL": self.url,
            # a lock taken out of the documented order fails its request (a 5xx the soak
            # reports) instead of risking a deadlock unseen
            "METASERVICE_CHECK_LOCK_ORDER": "1",
            **self.settings,
        })
        return env

    def _cli(self, *args: str) -> str:
        done = subprocess.run([self.python, "-m", "metaservice", *args], env=self.environment(),
                              capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise ServerError(f"metaservice {' '.join(args)} exited {done.returncode}: "
                              f"{done.stderr.strip()[-2000:]}")
        return done.stdout

    def prepare(self) -> str:
        """Migrate the database and create the soak's writer token (every role uses it: a
        writer acts only on the jobs it registered, and the soak's roles share them across
        restarts). Returns the token."""
        self.logs.mkdir(parents=True, exist_ok=True)
        if isinstance(self.warehouse, Path):
            self.warehouse.mkdir(parents=True, exist_ok=True)
        self._cli("db", "upgrade")
        printed = self._cli("token", "create", "--name", TOKEN_NAME, "--role", "writer")
        self.token = printed.strip().splitlines()[-1].strip()
        return self.token

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> None:
        for server in self.servers:
            self._spawn(server)
        for server in self.servers:
            assert server.process is not None
            wait_until_answering(server.url + "/readyz", server.process, server.log)
        if self.balancer:
            self._start_balancer()

    def _spawn(self, server: Server) -> None:
        with server.log.open("ab") as out:
            server.process = subprocess.Popen(
                [self.python, "-m", "metaservice", "serve", "--no-migrate",
                 "--port", str(server.port)],
                env=self.environment(), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        server.starts += 1

    def _start_balancer(self) -> None:
        haproxy = haproxy_command()
        if haproxy is None:
            raise ServerError("haproxy is not installed (bash .ci/install-system-packages.sh)")
        if not HAPROXY_CONFIG.is_file():
            raise ServerError(f"no {HAPROXY_CONFIG}: run the soak from the repository")
        env = {**os.environ, "METASERVICE_LB_BIND": f"127.0.0.1:{self.balancer_port}"}
        for server in self.servers:
            env[f"METASERVICE_REPLICA_{server.index + 1}"] = server.address
        with self.balancer_log.open("ab") as out:
            self.balancer_process = subprocess.Popen(
                [haproxy, "-db", "-f", str(HAPROXY_CONFIG)], env=env, cwd=self.logs,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        wait_until_answering(self.url + "/healthz", self.balancer_process, self.balancer_log)

    def kill(self, index: int) -> int:
        """SIGKILL server ``index``; returns its pid."""
        server = self.servers[index]
        assert server.process is not None
        pid = server.process.pid
        os.killpg(pid, signal.SIGKILL)
        server.process.wait()
        return pid

    def restart(self, index: int, timeout: float = 60.0) -> None:
        """Start server ``index`` again on its port and wait until it answers ``/healthz`` (the
        database may be down meanwhile: it is alive, and answers 503 until it is back)."""
        server = self.servers[index]
        self._spawn(server)
        assert server.process is not None
        wait_until_answering(server.url + "/healthz", server.process, server.log, timeout)

    def stop(self) -> None:
        """SIGTERM every process (uvicorn drains its requests), SIGKILL what is left after
        20 s."""
        processes = [s.process for s in self.servers if s.process is not None]
        if self.balancer_process is not None:
            processes.append(self.balancer_process)
        for process in processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + 20
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
