"""Spark and Iceberg fixtures of the plugin's tests.

One local SparkSession per test session (``local[2]``, two shuffle partitions, UTC), one
temporary warehouse with a pyiceberg SQL catalog on SQLite named ``lake`` (also reachable by
name through ``PYICEBERG_CATALOG__LAKE__*``, as executors reach it), and a fresh database
(namespace) per test so tests never see each other's tables.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="session")
def catalog(warehouse: Path):  # type: ignore[no-untyped-def]
    from pyiceberg.catalog.sql import SqlCatalog

    props = {"uri": f"sqlite:///{warehouse / 'catalog.db'}", "warehouse": f"file://{warehouse}"}
    for key, value in props.items():
        os.environ[f"PYICEBERG_CATALOG__LAKE__{key.upper()}"] = value
    os.environ["PYICEBERG_CATALOG__LAKE__TYPE"] = "sql"
    return SqlCatalog("lake", **props)


@pytest.fixture
def database(catalog) -> str:  # type: ignore[no-untyped-def]
    """A fresh namespace; tables of a test are named ``lake.<database>.<table>``."""
    name = f"db_{uuid.uuid4().hex[:10]}"
    catalog.create_namespace(name)
    return name


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark_plugin-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
