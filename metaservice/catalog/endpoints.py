"""The Iceberg REST catalog's routes, mounted under ``/iceberg``.

Paths, status codes and bodies follow the Iceberg REST catalog OpenAPI specification; the
catalog serves no ``prefix`` (``/iceberg/v1/namespaces``…). The routes live by concept:
``namespaces/endpoints`` (configuration, namespaces), ``tables/endpoints``,
``tables/commit_endpoints``, ``views/endpoints`` (Iceberg views) and ``read_sessions/endpoints``
(consistent warehouses), each independent of the others.
Every error of a request under ``/iceberg``, authentication and unknown routes included, is
rendered in the Iceberg error model by one renderer (``error_rendering.iceberg_error_response``),
registered with the app's error handlers once, whichever is installed first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from fastapi import FastAPI
from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from metaservice.catalog.config import ENDPOINTS
from metaservice.catalog.deps import PREFIX
from metaservice.catalog.error_rendering import iceberg_error_response
from metaservice.catalog.errors import IcebergError
from metaservice.catalog.namespaces import endpoints as namespace_endpoints
from metaservice.catalog.read_sessions import endpoints as read_session_endpoints
from metaservice.catalog.site import CatalogSite
from metaservice.catalog.storage.credentials import CredentialVendor, RequestSigner
from metaservice.catalog.storage.object_store import ObjectStores, is_object_store
from metaservice.catalog.storage.warehouse import MetadataJsonCache, Warehouse
from metaservice.catalog.tables import claims, commit_endpoints
from metaservice.catalog.tables import endpoints as table_endpoints
from metaservice.catalog.tables.purges import PurgeWorker
from metaservice.catalog.views import endpoints as view_endpoints
from metaservice.error_handlers import render_errors_under
from metaservice.settings import Settings

logger = logging.getLogger(__name__)

__all__ = ["ENDPOINTS", "install_catalog"]


def install_catalog(app: FastAPI, settings: Settings) -> None:
    """Mount the catalog: its identity and warehouse, its purge worker (started and stopped
    with the app's lifespan), its metrics, its error model, its routes."""
    stores = ObjectStores.from_settings(settings)
    app.state.catalog = CatalogSite(settings.catalog_name, Warehouse(
        settings.warehouse, settings.allowed_locations,
        max_metadata_bytes=settings.max_metadata_bytes,
        read_seconds=settings.metadata_read_seconds,
        metadata_cache_bytes=settings.metadata_cache_bytes,
        stores=stores), credential_vendor(settings, stores), request_signer(settings, stores),
        (settings.public_url or f"http://{settings.host}:{settings.port}").rstrip("/")
        + PREFIX)
    app.state.catalog_purges = PurgeWorker(
        app.state.database, app.state.catalog.warehouse, clock=app.state.context.clock,
        page_size=settings.purge_page_size, claim_seconds=settings.purge_claim_seconds,
        poll_seconds=settings.purge_poll_seconds, answer_seconds=settings.purge_answer_seconds)
    app.state.catalog_metrics = Counter(
        "metaservice_iceberg_metrics_reports",
        "Iceberg metrics reports received by the catalog, by report type.",
        ["kind"], registry=app.state.metrics.registry)
    app.state.metrics.registry.register(
        MetadataCacheCollector(app.state.catalog.warehouse.metadata_cache))
    render_errors_under(app, PREFIX, iceberg_error_response, IcebergError, ValidationError)
    for router in (read_session_endpoints.router, namespace_endpoints.router,
                   table_endpoints.router, commit_endpoints.router, view_endpoints.router):
        app.include_router(router)

    def fill_identities() -> None:
        try:
            filled = claims.fill_identities(app.state.database, app.state.catalog,
                                            app.state.context.clock.now_ms())
        except SQLAlchemyError as exc:  # not migrated yet: /readyz says so
            logger.warning("catalog_identities_not_filled",
                           extra={"error_class": type(exc).__name__})
            return
        if filled:
            logger.info("catalog_identities_filled", extra={"tables": filled})

    app.router.add_event_handler("startup", fill_identities)


def credential_vendor(settings: Settings, stores: ObjectStores) -> CredentialVendor | None:
    """What vends credentials for the warehouse's tables: STS with
    ``METASERVICE_VENDED_CREDENTIALS_ROLE_ARN`` on an ``s3://`` warehouse, else nothing."""
    if settings.vended_credentials_role_arn is None or not is_object_store(settings.warehouse):
        return None
    return CredentialVendor(settings.vended_credentials_role_arn,
                            settings.vended_credentials_seconds,
                            stores.properties(settings.warehouse),
                            sts_endpoint=settings.sts_endpoint,
                            client_endpoint=settings.vended_endpoint)


def request_signer(settings: Settings, stores: ObjectStores) -> RequestSigner | None:
    """What signs clients' requests to the warehouse's store: with
    ``METASERVICE_REMOTE_SIGNING`` on an ``s3://`` warehouse, else nothing."""
    if not settings.remote_signing or not is_object_store(settings.warehouse):
        return None
    return RequestSigner(stores.properties(settings.warehouse), settings.vended_endpoint)


class MetadataCacheCollector(Collector):
    """The cache of metadata files' JSON (``METASERVICE_METADATA_CACHE_BYTES``), at scrape:
    how often a load found its file's JSON there, and the bytes it holds."""

    def __init__(self, cache: MetadataJsonCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        cache = self._cache
        yield CounterMetricFamily(
            "metaservice_catalog_metadata_cache_hits",
            "Lookups of a metadata file's JSON (a table answer) that found it in memory.",
            value=cache.hits)
        yield CounterMetricFamily(
            "metaservice_catalog_metadata_cache_misses",
            "Lookups of a metadata file's JSON that did not (serialised then).", value=cache.misses)
        yield GaugeMetricFamily(
            "metaservice_catalog_metadata_cache_bytes",
            "Bytes of metadata JSON held in memory (at most METASERVICE_METADATA_CACHE_BYTES).",
            value=cache.size)
