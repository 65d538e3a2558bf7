"""The soak's roles run with an environment of their own: nothing of the caller's MetaService,
pyiceberg or AWS configuration reaches them (a test suite's ``PYICEBERG_CATALOG__LAKE__*`` once made
``lake`` a SQL catalog for the roles, and the streaming sibling never found its source)."""

from __future__ import annotations

import pytest

from metaservice_soak.harness import role_environment


def test_roles_get_no_metaservice_pyiceberg_or_aws_configuration(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYICEBERG_CATALOG__LAKE__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__LAKE__URI", "sqlite:////tmp/elsewhere.db")
    monkeypatch.setenv("METASERVICE_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "the-caller-s-own")
    monkeypatch.setenv("AWS_PROFILE", "production")
    monkeypatch.setenv("SOAK_UNRELATED", "kept")

    environment = role_environment()

    assert not [k for k in environment if k.startswith(("PYICEBERG_", "METASERVICE_", "AWS_"))]
    assert environment["SOAK_UNRELATED"] == "kept"
    assert environment["PATH"]
