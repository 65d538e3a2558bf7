"""A catalog named in Spark's own configuration (``spark.sql.catalog.<name>.*``) is found by the
driver-side API and by the ``metaservice`` format, and wins over pyiceberg's configuration."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

import spark_plugin as sp
from spark_plugin import _iceberg as ice

pytestmark = pytest.mark.spark


@pytest.fixture
def spark_lake(spark, tmp_path: Path):
    """Spark's configuration names ``lake`` as a JDBC catalog on another SQLite file than the
    one pyiceberg's environment names ``lake`` (``conftest.py``); restored afterwards."""
    db, warehouse = tmp_path / "spark-catalog.db", tmp_path / "wh"
    warehouse.mkdir()
    settings = {"spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
                "spark.sql.catalog.lake.type": "jdbc",
                "spark.sql.catalog.lake.uri": f"jdbc:sqlite:{db}",
                "spark.sql.catalog.lake.warehouse": str(warehouse)}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield SqlCatalog("lake", uri=f"sqlite:///{db}", warehouse=f"file://{warehouse}")
    finally:
        for key in settings:
            spark.conf.unset(key)
        sp.register_data_source(spark)  # the format without these settings again


def test_spark_settings_win_over_pyiceberg_and_reach_the_format(spark, spark_lake, catalog,
                                                                client, live_server_url):
    database = f"db_{uuid.uuid4().hex[:10]}"
    spark_lake.create_namespace(database)
    table = spark_lake.create_table(
        (database, "t"), schema=Schema(NestedField(1, "id", LongType(), required=False)))
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    snapshot = spark_lake.load_table((database, "t")).current_snapshot().snapshot_id
    name = f"lake.{database}.t"
    client.report_root_barrier(name, snapshot, 1_000)

    spec = ice.find_catalog("lake", spark=spark)
    assert spec.origin == "spark" and spec.props["type"] == "sql"
    # the driver-side API finds the table without a catalog argument (active session) ...
    assert ice.load_table(name).metadata_location == table.refresh().metadata_location
    assert not catalog.table_exists((database, "t"))  # ... which pyiceberg's lake has not
    # ... and so does the format, in Spark's Python workers, from the registered settings
    sp.register_data_source(spark, url=live_server_url)
    rows = (spark.read.format("metaservice").option("metaservice.url", live_server_url)
            .option("table", name).option("leaseSeconds", "0").load().collect())
    assert sorted(r.id for r in rows) == [1, 2]
