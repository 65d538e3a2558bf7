"""``deploy/haproxy/haproxy.cfg`` replays a replay-safe request whose replica dies while handling
it on the other replica, also when the request's body reached haproxy after its headers (as
httpx may send it): haproxy must hold the whole request to replay it. Two stand-in replicas on
loopback, no database: one answers health checks and drops every other connection with a
reset after reading the request, as a SIGKILLed server does; the other answers 200."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from benchmarks._environment import free_port
from metaservice_soak.replicas import HAPROXY_CONFIG, haproxy_command
from tests.soak.conftest import require_haproxy

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


def _serve(listener: socket.socket, dies: bool) -> None:
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:  # closed: the test is over
            return
        with connection:
            request = connection.recv(65536)
            if dies and not request.startswith(b"GET /healthz"):
                time.sleep(0.05)  # the request is being handled…
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      (1).to_bytes(4, "little") + (0).to_bytes(4, "little"))
                continue  # …and the process dies: a reset, no byte of an answer
            connection.sendall(OK)


@pytest.fixture
def balancer() -> Iterator[int]:
    require_haproxy()
    listeners = []
    ports = {}
    for name, dies in (("1", True), ("2", False)):
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)
        ports[name] = listener.getsockname()[1]
        threading.Thread(target=_serve, args=(listener, dies), daemon=True).start()
    port = free_port()
    env = {**os.environ, "METASERVICE_LB_BIND": f"127.0.0.1:{port}",
           "METASERVICE_REPLICA_1": f"127.0.0.1:{ports['1']}",
           "METASERVICE_REPLICA_2": f"127.0.0.1:{ports['2']}"}
    haproxy = subprocess.Popen([str(haproxy_command()), "-db", "-f", str(HAPROXY_CONFIG)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or haproxy.poll() is not None:
                    raise
                time.sleep(0.05)
        yield port
    finally:
        haproxy.terminate()
        haproxy.wait(timeout=10)
        for listener in listeners:
            listener.close()


def test_a_replay_safe_request_sent_in_two_packets_survives_its_replica_dying(
        balancer: int) -> None:
    statuses = []
    for _ in range(4):  # round robin: at least two of them go to the dying replica first
        with socket.create_connection(("127.0.0.1", balancer), timeout=10) as client:
            client.sendall(b"POST /jobs/j/barriers/next HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n")
            time.sleep(0.02)  # the body in a packet of its own
            client.sendall(b"{}")
            statuses.append(client.recv(4096)[:12])
    assert statuses == [b"HTTP/1.1 200"] * 4
