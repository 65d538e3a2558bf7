"""``sp.open_read_session``'s checks that need no Spark, and ``sp.open_view``, its former name:
still public, it warns and does the same; ``MetaServiceClient.releasing_read_sessions`` against a
real server, for engines that connect to a consistent warehouse for every read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import spark_plugin as sp


class _NoCatalogs:
    """A SparkSession stand-in whose configuration has no catalog."""

    def sql(self, statement: str) -> Any:
        assert statement == "SET"
        return self

    def collect(self) -> list[tuple[str, str]]:
        return []


def test_open_read_session_checks_its_arguments() -> None:
    with pytest.raises(sp.CatalogConfigError, match="unknown consistent warehouse"):
        sp.open_read_session(_NoCatalogs(), "lake_strong", at="weak")
    with pytest.raises(sp.CatalogConfigError, match="invalid read session catalog name"):
        sp.open_read_session(_NoCatalogs(), "lake")
    with pytest.raises(sp.CatalogConfigError, match="no catalog 'lake'"):
        sp.open_read_session(_NoCatalogs(), "lake_strong", at="barrier=5")


def test_open_view_is_a_deprecated_alias() -> None:
    assert "open_read_session" in sp.__all__ and "open_view" in sp.__all__
    with (pytest.warns(DeprecationWarning, match="open_read_session"),
          pytest.raises(sp.CatalogConfigError, match="unknown consistent warehouse")):
        sp.open_view(_NoCatalogs(), "lake_strong", view="weak")
    with (pytest.warns(DeprecationWarning),
          pytest.raises(sp.CatalogConfigError, match="no catalog 'lake'")):
        sp.open_view(_NoCatalogs(), "lake_strong", catalog="lake", view="strong")


@pytest.fixture
def capped_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server of its own (SQLite, the real clock) serving the catalog ``lake``, whose token
    may hold two live read sessions."""
    from metaservice.app import create_app
    from metaservice.db.engine import build_engine
    from metaservice.db.migrate import upgrade_to_head
    from metaservice.db.session import Database
    from metaservice.settings import Settings
    from tests.conftest import ServerThread

    path = tmp_path_factory.mktemp("capped")
    url = f"sqlite:///{path / 'metaservice.db'}"
    database = Database(build_engine(url))
    upgrade_to_head(database.engine)
    app = create_app(Settings(database_url=url, warehouse=str(path / "warehouse"),
                              catalog_name="lake", max_read_sessions=2), database=database)
    with ServerThread(app) as server:
        yield server.url
    database.dispose()


def _connect(url: str, warehouse: str) -> httpx.Response:
    """What an engine's connection to the warehouse sends first (DuckDB's ATTACH, pyiceberg's
    load_catalog)."""
    return httpx.get(f"{url}/iceberg/v1/config", params={"warehouse": warehouse}, timeout=30)


def test_releasing_read_sessions_releases_the_sessions_opened_in_the_block(
        capped_url: str) -> None:
    client = sp.MetaServiceClient(capped_url)
    kept = _connect(capped_url, "lake@strong").json()["overrides"]["prefix"]
    # one session at a time, again and again, beyond the cap: each is released at the block's end
    for _ in range(4):
        with client.releasing_read_sessions("lake@strong"):
            answer = _connect(capped_url, "lake@strong")
            assert answer.status_code == 200, answer.text
            opened = answer.json()["overrides"]["prefix"]
            assert {x["lease_id"] for x in client.list_leases(holder="lake@strong")} == {
                kept.removeprefix("session-"), opened.removeprefix("session-")}
        assert [x["lease_id"] for x in client.list_leases(holder="lake@strong")] == [
            kept.removeprefix("session-")]  # the session opened before the block lives on
    # an error in the block releases its session too; another warehouse's are not touched
    with pytest.raises(RuntimeError), client.releasing_read_sessions("lake@barrier=1"):
        assert _connect(capped_url, "lake@barrier=1").status_code == 200
        with client.releasing_read_sessions("lake@strong"):
            assert _connect(capped_url, "lake@strong").status_code == 429  # the cap: 2
            raise RuntimeError("the read failed")
    assert client.list_leases(holder="lake@barrier=1") == []
    assert [x["lease_id"] for x in client.list_leases(holder="lake@strong")] == [
        kept.removeprefix("session-")]
    assert _connect(capped_url, "lake@barrier=1").status_code == 200
    # without it, the sessions an engine opens stay live until the cap refuses one more
    assert _connect(capped_url, "lake@strong").status_code == 429
    client.close()
