"""Tables in a namespace of several levels whose parts hold spaces, dots and accents, through
the plugin's Iceberg layer without Spark: created with their namespace's every level, named
back in the dotted form the server uses, committed with their barrier through MetaService's
built-in catalog."""

from __future__ import annotations

import pyarrow as pa
import pytest

import spark_plugin as sp
from spark_plugin import _iceberg as ice
from tests.spark_plugin.conftest import BUILTIN_CATALOG

pytestmark = pytest.mark.iceberg

NAMESPACE = ("sales dept", "eu.west")


def spark_schema():  # pyspark's types are plain Python: no JVM starts
    from pyspark.sql.types import LongType, StructField, StructType

    return StructType([StructField("id", LongType())])


@pytest.fixture
def client(builtin_url: str):
    with sp.MetaServiceClient(builtin_url) as c:
        yield c


def test_a_table_in_a_nested_namespace_is_created_with_its_levels(client) -> None:
    name = sp.TableName.of(BUILTIN_CATALOG, NAMESPACE, "orders été")
    assert str(name) == f"{BUILTIN_CATALOG}.`sales dept`.`eu.west`.`orders été`"

    table = sp.create_table_from_spark_schema(str(name), spark_schema(), client=client)

    assert tuple(table.name()) == ("sales dept", "eu.west", "orders été")
    assert ice.qualified_name(table) == str(name)
    listed = client.request("GET", "/iceberg/v1/namespaces",
                            params={"parent": "sales dept"}, idempotent=True)
    assert ["sales dept", "eu.west"] in listed["namespaces"]
    again = sp.create_table_from_spark_schema(name, spark_schema(), client=client, exist_ok=True)
    assert again.metadata.table_uuid == table.metadata.table_uuid


def test_a_commit_to_a_nested_table_records_its_barrier_under_its_dotted_name(client) -> None:
    name = sp.TableName.of(BUILTIN_CATALOG, NAMESPACE, "totals.v2")
    table = sp.create_table_from_spark_schema(name, spark_schema(), client=client)
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})

    done = ice.commit_sink(table, job="ingest", barrier=1_000, root=True,
                           data_files=ice.data_files_from_arrow(table, rows))

    assert client.get_version(name) == sp.TableVersion(str(name), 1_000, done.snapshot_id)
    barriers = client.table_barriers(name)
    assert barriers["table"] == f"{BUILTIN_CATALOG}.`sales dept`.`eu.west`.`totals.v2`"
    assert ice.load_table(name, client=client).scan().to_arrow().num_rows == 2


def test_the_qualified_name_of_a_table_quotes_its_parts() -> None:
    class Catalog:
        name = "lake"

    class Table:
        catalog = Catalog()

        def __init__(self, *identifier: str) -> None:
            self.identifier = identifier

        def name(self) -> tuple[str, ...]:
            return self.identifier

    assert ice.qualified_name(Table("db", "t")) == "lake.db.t"  # as before
    assert ice.qualified_name(Table("a", "b", "t")) == "lake.a.b.t"
    assert ice.qualified_name(Table("new.db", "ta ble")) == "lake.`new.db`.`ta ble`"


@pytest.mark.spark
def test_a_barrier_job_reads_and_writes_nested_tables_with_spark_s_files(spark, client) -> None:
    """Spark's own Parquet writer and reader (not Iceberg's runtime) under locations that hold
    the names' spaces, dots, accents, '#', '?' and ':' (a glob character makes the read go
    through Arrow)."""
    orders, totals, odd = (sp.TableName.of(BUILTIN_CATALOG, NAMESPACE, t)
                           for t in ("orders été", "totals.v2#1", "odd?: x"))
    schema = spark.createDataFrame([], "id long, amount long").schema
    for name in (orders, totals, odd):
        sp.create_table_from_spark_schema(name, schema, client=client)
    for barrier, ids in ((1_000, [1, 2]), (2_000, [3])):
        sp.append_root(spark, spark.createDataFrame([(i, i * 10) for i in ids], schema), orders,
                       client=client, barrier=barrier)
        with sp.BarrierJob(spark, "nested-names", [orders], [totals, odd],
                           client=client) as job:
            for step in job.available():
                changes = step.read_changes(orders)
                step.write(totals, changes.selectExpr("id", "amount * 2 AS amount"))
                step.write(odd, changes)
                step.commit()
    for name, factor in ((totals, 2), (odd, 1)):
        assert client.get_version(name, "weak").barrier == 2_000
        rows = ice.load_table(name, client=client).scan().to_arrow()
        assert sorted(zip(rows["id"].to_pylist(), rows["amount"].to_pylist(), strict=True)) == [
            (i, i * 10 * factor) for i in (1, 2, 3)], name
    with sp.consistent_read(spark, [orders, totals, odd], client=client) as frames:
        assert {n: frames[n].count() for n in frames} == dict.fromkeys(
            map(str, (orders, totals, odd)), 3)
