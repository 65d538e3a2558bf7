"""The soak's private PostgreSQL: its own cluster on its own port, crashed and started again
with every committed row kept, never the machine's shared server."""

from __future__ import annotations

import psycopg
import pytest

from metaservice_soak.postgres import PrivateCluster

pytestmark = pytest.mark.slow  # a PostgreSQL cluster of its own


def test_a_crash_keeps_every_committed_row(private_cluster: PrivateCluster) -> None:
    with psycopg.connect(private_cluster.libpq_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE acknowledged (id int PRIMARY KEY)")
        for i in range(100):
            conn.execute("INSERT INTO acknowledged VALUES (%s)", (i,))
        data_directory = conn.execute("SHOW data_directory").fetchone()
    assert data_directory is not None
    assert data_directory[0] == str(private_cluster.data)

    private_cluster.crash()
    assert not private_cluster.running()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(private_cluster.libpq_url, connect_timeout=2)

    private_cluster.start()
    with psycopg.connect(private_cluster.libpq_url) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM acknowledged ORDER BY id")]
    assert ids == list(range(100))
    log = private_cluster.log.read_text()
    assert "database system was interrupted" in log or "not properly shut down" in log


def test_the_cluster_is_private(private_cluster: PrivateCluster) -> None:
    assert private_cluster.port != 5432
    assert private_cluster.url.startswith(f"postgresql+psycopg://postgres@127.0.0.1:"
                                          f"{private_cluster.port}/")
    with psycopg.connect(private_cluster.libpq_url) as conn:
        listen = conn.execute("SHOW listen_addresses").fetchone()
        sockets = conn.execute("SHOW unix_socket_directories").fetchone()
    assert listen == ("127.0.0.1",)
    assert sockets == (str(private_cluster.socket_dir),)
