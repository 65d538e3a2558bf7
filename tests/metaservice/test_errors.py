"""Every error, ours or the framework's, has the error shape of docs/contract.md#errors."""

from __future__ import annotations

import subprocess
import sys

import httpx


def assert_error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    assert "Traceback" not in response.text
    return body["error"]


def test_unknown_route_is_404_json(client: httpx.Client) -> None:
    assert_error(client.get("/no/such/route"), 404, "not_found")


def test_wrong_method_is_405_json(client: httpx.Client) -> None:
    assert_error(client.delete("/jobs"), 405, "method_not_allowed")


def test_malformed_json_is_422_json(client: httpx.Client) -> None:
    response = client.post("/tables/lake/db/t/barriers", content=b"{not json",
                           headers={"content-type": "application/json"})
    assert_error(response, 422, "invalid_request")


def test_out_of_range_snapshot_id_is_422(client: httpx.Client) -> None:
    response = client.post("/tables/lake/db/t/barriers", json={"snapshot_id": 2**63})
    err = assert_error(response, 422, "invalid_request")
    assert err["details"]["problems"][0]["location"][-1] == "snapshot_id"


def test_negative_barrier_is_422(client: httpx.Client) -> None:
    response = client.post("/tables/lake/db/t/barriers", json={"snapshot_id": 1, "barrier": -1})
    assert_error(response, 422, "invalid_request")


def test_unknown_consistency_type_names_the_valid_ones(client: httpx.Client) -> None:
    err = assert_error(client.get("/version/eventual/lake/db/t"), 422, "invalid_request")
    assert "strong" in err["message"] and "weak" in err["message"]


def test_unknown_fields_are_refused(client: httpx.Client) -> None:
    response = client.post("/versions", json={"tables": ["lake.db.t"], "consistncy": "weak"})
    assert_error(response, 422, "invalid_request")


def test_domain_errors_depend_on_no_web_framework_or_database_driver() -> None:
    """Services and pure modules raise the domain errors without importing HTTP; the handlers
    that render them live beside the app (``metaservice/error_handlers.py``)."""
    probe = ("import sys, metaservice.errors; "
             "print(sorted({m.split('.')[0] for m in sys.modules}))")
    loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                            text=True).stdout
    for framework in ("fastapi", "starlette", "sqlalchemy", "pydantic"):
        assert f"'{framework}'" not in loaded, loaded
