"""The lease that ``consistent_read`` holds for its block, renewed in the background, against the
real server: a lease that is lost is not renewed again and again."""

from __future__ import annotations

import time
import uuid

import httpx

import spark_plugin as sp
from spark_plugin._consistent_read import _LeaseRenewer


class RecordingTransport(httpx.HTTPTransport):
    """The real HTTP transport, remembering the path of every request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return super().handle_request(request)


def test_the_renewer_stops_once_the_lease_has_expired(live_server_url: str) -> None:
    transport = RecordingTransport()
    table = f"lake.renewal_{uuid.uuid4().hex[:8]}.t"
    with sp.MetaServiceClient(live_server_url, transport=transport) as client:
        client.report_root_barrier(table, 1)
        lease = client.create_lease("renewal-test", 0.2, {table: 1})
        time.sleep(0.3)  # the lease runs out before its first renewal (after one second)
        renewer = _LeaseRenewer(client, lease.lease_id, 0.2)
        renewer.start()
        try:
            renewer._thread.join(timeout=5)
            assert not renewer._thread.is_alive(), "the renewer keeps renewing a dead lease"
        finally:
            renewer.stop()
    renewals = [p for p in transport.paths if p.endswith("/renew")]
    assert renewals == [f"/leases/{lease.lease_id}/renew"]
    assert isinstance(renewer.lost, sp.LeaseExpiredError)
    assert not isinstance(renewer.lost, sp.SnapshotExpiredError)


def test_the_renewer_keeps_a_live_lease_alive(live_server_url: str) -> None:
    table = f"lake.renewal_{uuid.uuid4().hex[:8]}.t"
    with sp.MetaServiceClient(live_server_url) as client:
        client.report_root_barrier(table, 1)
        first_term_ends = time.monotonic() + 1.5
        lease = client.create_lease("renewal-test", 1.5, {table: 1})
        renewer = _LeaseRenewer(client, lease.lease_id, 1.5)
        renewer.start()
        try:
            while time.monotonic() < first_term_ends + 0.5:  # past the lease's first term:
                time.sleep(0.05)                            # only the renewals keep it
            shown = client.request("GET", f"/leases/{lease.lease_id}", idempotent=True)
            assert shown["expired"] is False
            assert renewer.lost is None and renewer._thread.is_alive()
        finally:
            renewer.stop()
        client.release_lease(lease.lease_id)
