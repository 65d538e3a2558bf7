"""The OpenAPI document is part of the contract: ``GET /openapi.json`` serves, byte for byte,
the document recorded in ``tests/metaservice/openapi/`` (one per authentication setting, since
the security requirements differ).

A change to the API changes the document on purpose; record it again with
``python -m tests.metaservice.test_openapi_document`` and review the diff with the change.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from benchmarks._environment import ServerThread
from metaservice.app import create_app
from metaservice.settings import Settings

RECORDED = Path(__file__).parent / "openapi"


def served_document(auth: str, database_url: str) -> bytes:
    app = create_app(Settings(database_url=database_url, auth=auth))  # type: ignore[arg-type]
    with ServerThread(app) as server:
        response = httpx.get(f"{server.url}/openapi.json", timeout=30)
    assert response.status_code == 200
    return response.content


@pytest.mark.parametrize("auth", ["required", "disabled"])
def test_served_document_is_the_recorded_one(auth: str, tmp_path: Path) -> None:
    served = served_document(auth, f"sqlite:///{tmp_path / 'metaservice.db'}")
    recorded = (RECORDED / f"auth-{auth}.json").read_bytes()
    assert served == recorded, (
        "GET /openapi.json differs from the recorded document; if the API change is intended, "
        "record it with `python -m tests.metaservice.test_openapi_document`")


def record() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        for auth in ("required", "disabled"):
            served = served_document(auth, f"sqlite:///{Path(scratch) / 'metaservice.db'}")
            (RECORDED / f"auth-{auth}.json").write_bytes(served)
            print(f"recorded {RECORDED / f'auth-{auth}.json'} ({len(served)} bytes)")


if __name__ == "__main__":
    record()
