"""HTTP only: liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from metaservice.db.migrate import current_revision, head_revision
from metaservice.deps import DatabaseDep

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz")
def healthz() -> dict:
    """The process is alive."""
    return {"status": "ok"}


@router.get("/readyz", operation_id="readyz", responses={503: {"description": "not ready"}})
def readyz(database: DatabaseDep) -> JSONResponse:
    """The database is reachable and migrated to the head revision."""
    try:
        current = current_revision(database.engine)
    except SQLAlchemyError:
        return JSONResponse(status_code=503, content={"error": {
            "code": "database_unavailable", "message": "the database is unreachable",
            "details": {}}})
    head = head_revision()
    if current != head:
        return JSONResponse(status_code=503, content={"error": {
            "code": "not_migrated", "message": "the database schema is not at the head revision",
            "details": {"current": current, "head": head}}})
    return JSONResponse({"status": "ready", "revision": current, "backend": database.dialect})
