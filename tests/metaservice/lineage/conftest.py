"""Fixtures of the lineage tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture
def openlineage_env() -> Iterator[dict[str, str]]:
    """``os.environ`` for OpenLineage settings, every ``OPENLINEAGE*`` variable restored after
    (the client itself adds some when it reads ``OPENLINEAGE_URL``)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("OPENLINEAGE")}
    for key in saved:
        del os.environ[key]
    try:
        yield os.environ  # type: ignore[misc]
    finally:
        for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
            del os.environ[key]
        os.environ.update(saved)
