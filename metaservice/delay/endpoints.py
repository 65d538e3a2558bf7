"""HTTP only: delay, end to end and per job, and the bottleneck."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Response

from metaservice.delay import service
from metaservice.delay.schemas import DelayOut, TableDelayDetailOut
from metaservice.deps import Context, ReadSession
from metaservice.names import TableName
from metaservice.path_params import CatalogPath, DatabasePath, TablePath

router = APIRouter(tags=["delay"])

WindowSeconds = Annotated[
    float, Query(gt=0, le=30 * 24 * 3600,
                 description="percentiles cover barriers committed in the last window_seconds")]


@router.get("/delay", response_model=DelayOut, operation_id="get_delay")
def get_delay(session: ReadSession, ctx: Context,
              window_seconds: WindowSeconds = service.DEFAULT_WINDOW_SECONDS) -> Response:
    """Every table's lag and bottleneck, every running job's local lag, and p50/p95/p99 of hop
    latency (per job) and of end-to-end latency (per table) over the window."""
    return _json(service.overview(session, ctx, window_seconds))


@router.get("/delay/{catalog}/{database}/{table}", response_model=TableDelayDetailOut,
            operation_id="get_table_delay")
def get_table_delay(catalog: CatalogPath, database: DatabasePath, table: TablePath,
                    session: ReadSession, ctx: Context,
                    window_seconds: WindowSeconds = service.DEFAULT_WINDOW_SECONDS,
                    ) -> Response:
    """The table's lag decomposed hop by hop along its upstream path, and its bottleneck."""
    return _json(service.table_delay(session, ctx, TableName(catalog, database, table),
                                     window_seconds))


def _json(answer: dict[str, Any]) -> Response:
    """Serialised once, by orjson; the service builds the answer from typed values in the
    documented shape (the tests validate it against the response model)."""
    return Response(orjson.dumps(answer), media_type="application/json")
