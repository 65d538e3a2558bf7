"""One MetaService client per server and token in each Python process (Spark's Python workers
live long and run many calls: a connection pool is kept, not rebuilt per call)."""

from __future__ import annotations

import threading

from spark_plugin._client import MetaServiceClient
from spark_plugin.streaming.options import Connection

_clients: dict[Connection, MetaServiceClient] = {}
_lock = threading.Lock()


def client_for(connection: Connection) -> MetaServiceClient:
    with _lock:
        client = _clients.get(connection)
        if client is None:
            client = _clients[connection] = MetaServiceClient(connection.url,
                                                              token=connection.token)
        return client
