"""Tests that need a tool (PostgreSQL, Chromium, haproxy, Spark 3.5, SeaweedFS, etcd and
Patroni) skip without it on a developer's machine and fail without it under CI, where
``.ci/run`` requires each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import missing

REQUIRED_BY = ["METASERVICE_REQUIRE_POSTGRES", "METASERVICE_REQUIRE_BROWSER",
               "METASERVICE_REQUIRE_HAPROXY", "METASERVICE_REQUIRE_SPARK_JVM",
               "METASERVICE_REQUIRE_PATRONI", "METASERVICE_REQUIRE_S3",
               "METASERVICE_REQUIRE_KAFKA", "METASERVICE_REQUIRE_PYICEBERG_SUITE"]


@pytest.mark.parametrize("variable", REQUIRED_BY)
def test_a_missing_tool_skips_unless_it_is_required(monkeypatch: pytest.MonkeyPatch,
                                                    variable: str) -> None:
    for name in ["CI", *REQUIRED_BY]:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(pytest.skip.Exception, match="the tool"):
        missing("the tool is missing", required_by=variable)
    for required in ("CI", variable):
        monkeypatch.setenv(required, "1")
        with pytest.raises(pytest.fail.Exception, match="the tool"):
            missing("the tool is missing", required_by=variable)
        monkeypatch.delenv(required)


def test_ci_requires_every_tool() -> None:
    """.ci/run sets every variable, so no such test can skip there."""
    from pathlib import Path

    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert all(f"export {variable}=1" in ci for variable in REQUIRED_BY)


def test_a_missing_haproxy_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    """The soak's tests look for haproxy through ``require_haproxy``: with none on the search
    path it skips on a developer's machine and fails under ``METASERVICE_REQUIRE_HAPROXY``."""
    from tests.soak import conftest as soak

    monkeypatch.setattr(soak, "haproxy_command", lambda: None)
    for name in ["CI", *REQUIRED_BY]:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(pytest.skip.Exception, match="haproxy"):
        soak.require_haproxy()
    monkeypatch.setenv("METASERVICE_REQUIRE_HAPROXY", "1")
    with pytest.raises(pytest.fail.Exception, match="haproxy"):
        soak.require_haproxy()


def _skips_then_fails_when_required(monkeypatch: pytest.MonkeyPatch, start: Any,
                                    variable: str, match: str) -> None:
    """``start()`` (a component's context manager, its program made missing) skips on a
    developer's machine and fails once ``variable`` requires the component."""
    for name in ["CI", *REQUIRED_BY]:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(pytest.skip.Exception, match=match), start():
        pass
    monkeypatch.setenv(variable, "1")
    with pytest.raises(pytest.fail.Exception, match=match), start():
        pass


def test_a_missing_seaweedfs_fails_when_required(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """The object store's tests start SeaweedFS through ``started_seaweedfs``: with no ``weed``
    it skips on a developer's machine and fails under ``METASERVICE_REQUIRE_S3``."""
    from metaservice_soak import seaweedfs
    from tests.conftest import started_seaweedfs

    monkeypatch.setattr(seaweedfs, "weed_command", lambda: None)
    _skips_then_fails_when_required(monkeypatch, lambda: started_seaweedfs(tmp_path),
                                    "METASERVICE_REQUIRE_S3", "SeaweedFS")


def test_missing_kafka_jars_fail_when_required(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    """The Kafka tests start a broker through ``started_kafka``: without its jars they skip on
    a developer's machine and fail under ``METASERVICE_REQUIRE_KAFKA``."""
    from metaservice_soak import kafka
    from tests.conftest import started_kafka

    monkeypatch.setattr(kafka, "kafka_jars", lambda directory=None: None)
    _skips_then_fails_when_required(monkeypatch, lambda: started_kafka(tmp_path),
                                    "METASERVICE_REQUIRE_KAFKA", "Kafka")


def test_a_missing_patroni_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    """The failover test looks for etcd and Patroni through ``missing_programs``: without them
    it skips on a developer's machine and fails under ``METASERVICE_REQUIRE_PATRONI``."""
    from tests.soak import test_patroni

    monkeypatch.setattr(test_patroni, "missing_programs", lambda: ["etcd", "patroni"])
    for name in ["CI", *REQUIRED_BY]:
        monkeypatch.delenv(name, raising=False)
    fixture = test_patroni.patroni.__wrapped__  # type: ignore[attr-defined]
    with pytest.raises(pytest.skip.Exception, match="etcd, patroni"):
        next(fixture(None))
    monkeypatch.setenv("METASERVICE_REQUIRE_PATRONI", "1")
    with pytest.raises(pytest.fail.Exception, match="etcd, patroni"):
        next(fixture(None))
