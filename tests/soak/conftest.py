"""What the soak's tests need: the PostgreSQL server binaries (``initdb``, ``pg_ctl``) for a
private cluster, and haproxy. Both fail instead of skipping under CI
(``METASERVICE_REQUIRE_POSTGRES``, ``METASERVICE_REQUIRE_HAPROXY``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from metaservice_soak.postgres import ClusterError, PrivateCluster
from metaservice_soak.replicas import haproxy_command
from tests.conftest import missing


def require_haproxy() -> None:
    if haproxy_command() is None:
        missing("haproxy is not installed (bash .ci/install-system-packages.sh)",
                required_by="METASERVICE_REQUIRE_HAPROXY")


@pytest.fixture
def private_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    """A private PostgreSQL cluster, running; removed afterwards."""
    root: Path = tmp_path_factory.mktemp("postgres")
    cluster = PrivateCluster(root / "cluster")
    try:
        cluster.create()
    except (ClusterError, FileNotFoundError) as exc:
        cluster.remove()
        missing(f"cannot create a private PostgreSQL cluster: {exc}",
                required_by="METASERVICE_REQUIRE_POSTGRES")
    try:
        yield cluster
    finally:
        cluster.remove()
