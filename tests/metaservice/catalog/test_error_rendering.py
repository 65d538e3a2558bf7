"""Every error of a request under ``/iceberg`` is rendered in the Iceberg error model, every
other error in the shape of docs/contract.md#errors, whichever of the two the app installs first:
the error handlers ask at request time which renderer owns the request's path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy.exc import OperationalError

from metaservice.catalog.deps import PREFIX
from metaservice.catalog.error_rendering import iceberg_error_response
from metaservice.catalog.errors import IcebergError, NoSuchTableError
from metaservice.error_handlers import install_error_handlers, render_errors_under
from metaservice.errors import UnknownJobError

UNAVAILABLE = OperationalError("SELECT 1", {}, Exception("database is locked"))


class Body(BaseModel):
    name: str


def _app(catalog_first: bool) -> FastAPI:
    """Routes under the catalog's prefix and outside it that raise, with the catalog's
    renderer registered before or after the app's handlers."""
    app = FastAPI()

    def catalog() -> None:
        render_errors_under(app, PREFIX, iceberg_error_response, IcebergError)

    if catalog_first:
        catalog()
    install_error_handlers(app)
    if not catalog_first:
        catalog()

    def raising(error: Exception) -> Callable[[], Any]:
        def route() -> Any:
            raise error
        return route

    def take(body: Body) -> None:
        return None

    for prefix in (PREFIX, "/api"):
        app.get(f"{prefix}/unavailable")(raising(UNAVAILABLE))
        app.post(f"{prefix}/body")(take)
    app.get(f"{PREFIX}/table")(raising(NoSuchTableError("table does not exist: db.t")))
    app.get(f"{PREFIX}/job")(raising(UnknownJobError("no job etl", job="etl")))
    app.get("/api/job")(raising(UnknownJobError("no job etl", job="etl")))
    return app


def _iceberg(response: Any, status: int, type_: str) -> None:
    assert response.status_code == status, response.text
    assert response.json() == {"error": {"message": response.json()["error"]["message"],
                                         "type": type_, "code": status}}


def _core(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"} and error["code"] == code, error


@pytest.mark.parametrize("catalog_first", [True, False], ids=["catalog first", "catalog last"])
def test_errors_follow_the_path_not_the_installation_order(catalog_first: bool) -> None:
    client = TestClient(_app(catalog_first), raise_server_exceptions=False)
    _iceberg(client.get(f"{PREFIX}/unavailable"), 503, "ServiceUnavailableException")
    assert client.get(f"{PREFIX}/unavailable").headers["Retry-After"] == "1"
    _core(client.get("/api/unavailable"), 503, "database_unavailable")
    _iceberg(client.get(f"{PREFIX}/table"), 404, "NoSuchTableException")
    _iceberg(client.get(f"{PREFIX}/job"), 404, "NotFoundException")
    _core(client.get("/api/job"), 404, "unknown_job")
    _iceberg(client.get(f"{PREFIX}/no-such-route"), 404, "NotFoundException")
    _core(client.get("/no-such-route"), 404, "not_found")
    _iceberg(client.post(f"{PREFIX}/body", json=[1]), 400, "BadRequestException")
    _core(client.post("/api/body", json=[1]), 422, "invalid_request")


def test_the_app_renders_catalog_errors_in_the_iceberg_model(
        app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    """The app as ``create_app`` builds it: a catalog route whose database is unavailable, an
    unknown catalog route and table, and the core API's own answers beside them."""
    from metaservice.catalog.namespaces import service as namespaces

    client = TestClient(app, raise_server_exceptions=False)
    _iceberg(client.get(f"{PREFIX}/v1/namespaces/db/tables/t"), 404, "NoSuchTableException")
    _iceberg(client.get(f"{PREFIX}/nothing-here"), 404, "NotFoundException")
    _iceberg(client.post(f"{PREFIX}/v1/namespaces", json={"namespace": "db"}), 400,
             "BadRequestException")
    _core(client.get("/jobs/nothing-here"), 404, "unknown_job")
    _core(client.get("/nothing-here"), 404, "not_found")

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise UNAVAILABLE

    monkeypatch.setattr(namespaces, "list_namespaces", unavailable)
    _iceberg(client.get(f"{PREFIX}/v1/namespaces"), 503, "ServiceUnavailableException")
