"""The call-path measure runs against this checkout: the commit is traced through the catalog's
commit endpoint, its commit service and the barrier service, and the figures count them."""

from __future__ import annotations

from benchmarks import call_path


def test_the_call_path_of_a_catalog_commit_is_traced() -> None:
    modules, returns, path = call_path.measure()
    for module in ("metaservice.catalog.tables.commit_endpoints",
                   "metaservice.catalog.tables.commits", "metaservice.barriers.service",
                   "metaservice.core.protocol"):
        assert module in path
    assert modules == len(set(path)) and returns > 0
    assert call_path.figures(["a", "b", "a", "c", "a"]) == (3, 2, 2)
    assert call_path.figures(["a", "b", "a", "b", "a"]) == (2, 3, 2)
