"""The FastAPI application."""

from __future__ import annotations

from fastapi import FastAPI

from metaservice import __version__
from metaservice.barriers.endpoints import router as barriers_router
from metaservice.clock import Clock, SystemClock
from metaservice.context import ServiceContext
from metaservice.db.engine import build_engine
from metaservice.db.session import Database
from metaservice.delay.endpoints import router as delay_router
from metaservice.errors import install_error_handlers
from metaservice.health.endpoints import router as health_router
from metaservice.jobs.endpoints import router as jobs_router
from metaservice.lineage.endpoints import router as lineage_router
from metaservice.schemas import ERROR_RESPONSES
from metaservice.settings import Settings, get_settings
from metaservice.versions.endpoints import router as versions_router


def create_app(settings: Settings | None = None, *, clock: Clock | None = None,
               database: Database | None = None) -> FastAPI:
    """Build the app. The database schema must already be migrated (``metaservice db upgrade``
    or ``metaservice serve``, which migrates first)."""
    settings = settings or get_settings()
    database = database or Database(
        build_engine(settings.database_url, sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms))
    app = FastAPI(
        title="MetaService",
        version=__version__,
        description="Consistent versions across Iceberg tables written by many Spark jobs: "
                    "lineage, timestamp barriers, snapshot leases, delay and rollback plans.",
        responses=ERROR_RESPONSES,
    )
    app.state.settings = settings
    app.state.database = database
    app.state.context = ServiceContext(settings=settings, clock=clock or SystemClock())
    install_error_handlers(app)
    for router in (health_router, jobs_router, barriers_router, versions_router, lineage_router,
                   delay_router):
        app.include_router(router)
    return app
