"""Fixtures of the catalog tests: a server over loopback whose warehouse is a temporary
directory, and real Iceberg clients pointed at it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog

from metaservice.settings import Settings
from metaservice_soak.spark_cluster import StandaloneCluster
from tests.conftest import LOOPBACK_TLS, ServerThread, one_spark_cluster_at_a_time, serving
from tests.engines.spark41.rig import spark41_standalone


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "warehouse"


@pytest.fixture
def settings(database_url: str, warehouse: Path) -> Settings:
    return Settings(database_url=database_url, warehouse=str(warehouse))


@pytest.fixture
def server_database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The database of a server run as its own process (``metaservice serve`` migrates it)."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'metaservice.db'}"
    request.getfixturevalue("database")  # the session's PostgreSQL schema, migrated and wiped
    return str(request.getfixturevalue("database_url"))


@pytest.fixture
def server(app, loopback) -> Iterator[ServerThread]:  # type: ignore[no-untyped-def]
    with serving(loopback, app) as running:
        yield running


@pytest.fixture
def client(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30, verify=LOOPBACK_TLS) as http:
        yield http


def rest_catalog(url: str, **properties: str) -> RestCatalog:
    return RestCatalog("lake", **{"uri": f"{url}/iceberg", "warehouse": "lake", **properties})


def send_together(url: str, requests: list[tuple[str, dict[str, object]]],
                   key: dict[str, str]) -> list[httpx.Response]:
    """POST each ``(path, body)`` with the same key, all released at once; answers in order."""
    start = threading.Barrier(len(requests))
    answers: list[httpx.Response | None] = [None] * len(requests)

    def send(k: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            http.get("/healthz")  # connected before the start
            start.wait()
            answers[k] = http.post(requests[k][0], json=requests[k][1], headers=key)

    threads = [threading.Thread(target=send, args=(k,)) for k in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(a is not None for a in answers)
    return answers  # type: ignore[return-value]


@pytest.fixture
def catalog(server: ServerThread) -> RestCatalog:
    return rest_catalog(server.url)


@pytest.fixture(scope="module")
def spark41_cluster() -> Iterator[StandaloneCluster]:
    """A standalone cluster of the Spark 4.1 route (a master and two workers of one core each)
    for a file's tests, while no other cluster of the run lives; no process of it outlives
    it."""
    with one_spark_cluster_at_a_time(), spark41_standalone() as cluster:
        yield cluster
    assert not cluster.pids(), "processes of the Spark 4.1 cluster outlived it"
