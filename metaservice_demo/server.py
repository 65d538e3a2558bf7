"""The demo's MetaService: ``metaservice serve`` in a child process, started as a user starts
it (its settings in ``METASERVICE_*`` variables), stopped by the demo after everything else."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 15.0


def free_port(preferred: int) -> int:
    """``preferred`` when it is free on 127.0.0.1, else one the system picks (0: always)."""
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError("no free port")


def end_with_parent() -> None:
    """In the child, before ``metaservice serve`` starts (Linux): SIGTERM when the demo's
    process ends, also when it is killed outright, so that no server outlives it."""
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


@contextlib.contextmanager
def serve(database_file: Path, port: int, warehouse: str, catalog: str, log_file: Path,
          settings: dict[str, str] | None = None) -> Iterator[str]:
    """``metaservice serve`` on 127.0.0.1:``port``: its database the SQLite file
    ``database_file`` (migrated at start), its built-in Iceberg catalog ``catalog`` writing into
    ``warehouse`` (a directory, or ``s3://bucket/prefix`` with the store's variables in
    ``settings``, which the server's environment gets too), its output in ``log_file``. Yields
    its URL once ``/readyz`` answers.

    The server runs in a session of its own, so that Ctrl-C in a terminal or a SIGTERM to the
    demo's process group (``timeout``) reaches the demo only: the demo stops its streaming
    queries first, then the server (SIGTERM, as one stops ``metaservice serve``)."""
    env = {**os.environ,
           "METASERVICE_DATABASE_URL": f"sqlite:///{database_file}",
           "METASERVICE_HOST": "127.0.0.1",
           "METASERVICE_PORT": str(port),
           "METASERVICE_WAREHOUSE": warehouse,
           "METASERVICE_CATALOG_NAME": catalog,
           "METASERVICE_LOG_LEVEL": "warning",
           **(settings or {})}
    url = f"http://127.0.0.1:{port}"
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "metaservice", "serve"], env=env, stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=end_with_parent if sys.platform == "linux" else None)
    try:
        _wait_until_ready(proc, url, log_file)
        yield url
    finally:
        _stop(proc)


def _wait_until_ready(proc: subprocess.Popen[bytes], url: str, log_file: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    tail = log_file.read_text(errors="replace").strip().splitlines()[-20:]
    state = ("exited with status " + str(proc.returncode) if proc.poll() is not None
             else f"was not ready within {START_TIMEOUT_SECONDS:g} s")
    raise RuntimeError("the MetaService server (`metaservice serve`) " + state
                       + ("; its output:\n" + "\n".join(tail) if tail else ""))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
