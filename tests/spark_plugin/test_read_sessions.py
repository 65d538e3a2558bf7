"""``sp.open_read_session``'s checks that need no Spark, and ``sp.open_view``, its former name:
still public, it warns and does the same."""

from __future__ import annotations

from typing import Any

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
