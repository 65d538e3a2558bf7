"""The FastAPI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi_offline import FastAPIOffline

from metaservice import __version__, lean_routes
from metaservice.auth.dependencies import authorize
from metaservice.auth.endpoints import router as auth_router
from metaservice.auth.service import TokenCache, ensure_bootstrap_admin
from metaservice.barriers.endpoints import router as barriers_router
from metaservice.barriers.group_commit import RootReportCommitter
from metaservice.catalog.endpoints import install_catalog
from metaservice.catalog.form_encoded_names import FormEncodedNames
from metaservice.clock import Clock, SystemClock
from metaservice.context import ServiceContext
from metaservice.db.engine import build_engine
from metaservice.db.session import Database
from metaservice.delay.endpoints import router as delay_router
from metaservice.deps import refuse_unstorable_input
from metaservice.error_handlers import install_error_handlers
from metaservice.health.endpoints import router as health_router
from metaservice.jobs.endpoints import router as jobs_router
from metaservice.limits import BodySizeLimit, TokenBucket
from metaservice.lineage.endpoints import router as lineage_router
from metaservice.lineage.sender import OutboxSender, client_from_environment, naming_from
from metaservice.observability.endpoints import router as observability_router
from metaservice.observability.metrics import install_metrics
from metaservice.retention.expirations.endpoints import router as expirations_router
from metaservice.retention.leases.endpoints import router as leases_router
from metaservice.retention.leases.endpoints import versions_router as leased_versions_router
from metaservice.rollback.endpoints import router as rollback_router
from metaservice.schemas import ERROR_RESPONSES
from metaservice.settings import Settings, get_settings
from metaservice.ui.endpoints import router as ui_router
from metaservice.versions.endpoints import router as versions_router

DOCS_ASSETS = "/docs/assets"

LEAN_OPERATIONS = (
    "report_root_barrier", "next_barrier", "commit_barrier", "get_versions",
    "iceberg_load_table", "iceberg_session_load_table", "iceberg_commit_table")
"""The hot operations answered by ``lean_routes`` (the same endpoints, bound without FastAPI's
per-request machinery)."""


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The OpenLineage sender runs while the server does (when OpenLineage is configured), and
    so does the catalog's purge worker (it finishes, from their records, purges a stopped or
    killed server left); the root reports' committer records what was handed to it before the
    server stops."""
    sender: OutboxSender | None = app.state.lineage_sender
    if sender is not None:
        sender.start()
    app.state.catalog_purges.start()
    try:
        yield
    finally:
        app.state.root_reports.stop()
        app.state.catalog_purges.stop()
        if sender is not None:
            sender.stop()


def create_app(settings: Settings | None = None, *, clock: Clock | None = None,
               database: Database | None = None,
               openlineage_client: object | None = None) -> FastAPI:
    """Build the app. The database schema must already be migrated (``metaservice db upgrade``
    or ``metaservice serve``, which migrates first).

    OpenLineage events are written when ``openlineage_client`` is given, or else when the
    environment configures the OpenLineage client (``lineage/sender.py``); unless
    ``METASERVICE_LINEAGE_SENDER=none`` (``metaservice lineage-send`` delivers them then), the
    sender thread starts with the server's lifespan (``app.state.lineage_sender``)."""
    settings = settings or get_settings()
    database = database or Database(
        build_engine(settings.database_url, sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms))
    # /docs and /redoc with their scripts and styles served from the fastapi-offline package,
    # not from a CDN: the API reference works where the server has no internet.
    app = FastAPIOffline(
        static_url=DOCS_ASSETS,
        title="MetaService",
        version=__version__,
        description="Consistent versions across Iceberg tables written by many Spark jobs: "
                    "lineage, timestamp barriers, snapshot leases, delay and rollback plans.",
        responses=ERROR_RESPONSES,
        dependencies=[Depends(refuse_unstorable_input), Depends(authorize)],
        lifespan=_lifespan,
    )
    app.state.settings = settings
    app.state.database = database
    app.state.context = ServiceContext(settings=settings, clock=clock or SystemClock())
    client = openlineage_client if openlineage_client is not None else client_from_environment()
    app.state.lineage_sender = None
    if client is not None:
        app.state.context.lineage = naming_from(settings)
    if client is not None and settings.lineage_sender == "thread":
        app.state.lineage_sender = OutboxSender.with_client(
            database, client, poll_seconds=settings.lineage_poll_seconds,
            claim_seconds=settings.lineage_claim_seconds,
            max_backoff_seconds=settings.lineage_max_backoff_seconds)
    app.state.root_reports = RootReportCommitter(database, app.state.context)
    app.state.token_cache = TokenCache()
    app.state.rate_limiter = (
        TokenBucket(settings.rate_limit_per_second, settings.rate_limit_burst)
        if settings.rate_limit_per_second > 0 else None)
    if settings.admin_token is not None:
        with database.transaction(write=True) as session:
            ensure_bootstrap_admin(session, settings.admin_token.get_secret_value(),
                                   app.state.context.clock.now_ms())
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(FormEncodedNames)  # a '+' in a catalog name from Java's client: a space
    install_metrics(app)  # outermost: times every answer, refusals included
    install_error_handlers(app)
    _document_security(app, settings)
    for router in (health_router, auth_router, jobs_router, barriers_router, versions_router,
                   leased_versions_router, lineage_router, delay_router, rollback_router,
                   leases_router, expirations_router, observability_router, ui_router):
        app.include_router(router)
    install_catalog(app, settings)
    if settings.lean_routes:
        lean_routes.install(app, LEAN_OPERATIONS)
    return app


def _document_security(app: FastAPI, settings: Settings) -> None:
    """OpenAPI tells the truth about authentication: no bearer token when it is disabled, and
    none on the public routes (probes, metrics, documents, dashboard)."""
    from metaservice.auth.policy import PUBLIC, required_role

    generate = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = generate()
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                if settings.auth == "disabled":
                    operation.pop("security", None)
                elif required_role(method.upper(), path) == PUBLIC:
                    operation["security"] = []
        if settings.auth == "disabled":
            schema.get("components", {}).pop("securitySchemes", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
