"""HTTP only: the Prometheus scrape endpoint."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

router = APIRouter(tags=["operations"])


@router.get("/metrics", response_class=Response, operation_id="metrics",
            responses={200: {"content": {"text/plain": {}},
                             "description": "Prometheus text exposition format"}})
def metrics(request: Request) -> Response:
    """Request latency per route, commits, version answers by consistency type, lease
    operations; table lag, job local lag, hop latency, leases (computed at scrape)."""
    body = generate_latest(request.app.state.metrics.registry)
    return Response(content=body, media_type=CONTENT_TYPE_LATEST)
