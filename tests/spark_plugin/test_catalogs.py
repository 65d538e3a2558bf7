"""Which catalog holds a table: argument > Spark's configuration > pyiceberg's configuration >
MetaService's built-in catalog; and Spark's catalog settings in pyiceberg's terms."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

import spark_plugin as sp
from spark_plugin._iceberg import CatalogSpec, find_catalog, resolve_catalog
from spark_plugin._names import TableName

pytestmark = pytest.mark.iceberg

URL = "http://metaservice.example:8000"


def rest_conf(name: str, uri: str) -> dict[str, str]:
    prefix = f"spark.sql.catalog.{name}"
    return {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": "rest",
            f"{prefix}.uri": uri, f"{prefix}.warehouse": name, f"{prefix}.token": "t0k"}


def test_nothing_configured_is_the_builtin_catalog_with_the_clients_token(monkeypatch):
    monkeypatch.delenv("METASERVICE_URL", raising=False)
    monkeypatch.delenv("METASERVICE_TOKEN", raising=False)
    spec = find_catalog("house", conf={}, url=URL + "/", token="s3cret")
    assert spec == CatalogSpec.metaservice("house", URL, "s3cret")
    assert spec.origin == "metaservice"
    assert spec.props == {"type": "rest", "uri": f"{URL}/iceberg", "warehouse": "house",
                          "token": "s3cret"}
    assert spec.is_metaservice_catalog(URL)
    assert "s3cret" not in repr(spec)
    # without a token (none given, none in the environment) the catalog sends none
    assert "token" not in find_catalog("house", conf={}, url=URL).props


def test_the_environment_names_the_server_when_no_client_does(monkeypatch):
    monkeypatch.setenv("METASERVICE_URL", URL)
    monkeypatch.setenv("METASERVICE_TOKEN", "from-env")
    assert find_catalog("house", conf={}) == CatalogSpec.metaservice("house", URL, "from-env")


def test_pyiceberg_configuration_comes_before_the_builtin_catalog(monkeypatch):
    monkeypatch.setenv("PYICEBERG_CATALOG__HOUSE__TYPE", "in-memory")
    spec = find_catalog("house", conf={}, url=URL)
    assert (spec.origin, spec.properties) == ("pyiceberg", ())


def test_spark_configuration_comes_before_pyiceberg_configuration(monkeypatch):
    monkeypatch.setenv("PYICEBERG_CATALOG__HOUSE__TYPE", "in-memory")
    spec = find_catalog("house", conf=rest_conf("house", "http://other:9000/iceberg"), url=URL)
    assert spec.origin == "spark"
    assert spec.props == {"type": "rest", "uri": "http://other:9000/iceberg",
                          "warehouse": "house", "token": "t0k"}
    assert not spec.is_metaservice_catalog(URL)
    assert "t0k" not in repr(spec)
    # another catalog's settings do not count
    assert find_catalog("house", conf=rest_conf("lake", "http://x/iceberg"),
                        url=URL).origin == "pyiceberg"


@pytest.mark.spark
def test_a_sessions_catalog_settings_are_read_as_the_session_holds_them(spark, monkeypatch):
    """Set at run time, with characters a hand-made parser would trip on; read in one piece."""
    from spark_plugin._iceberg.catalogs import spark_conf
    from spark_plugin._spark_io import scoped_spark_conf

    monkeypatch.delenv("PYICEBERG_CATALOG__PROBE__TYPE", raising=False)
    odd = 'http://h:1/iceberg?a=1,b=(2)\n"quoted" \u00e9'
    with scoped_spark_conf(spark, {**rest_conf("probe", odd),
                                   "spark.sql.catalog.probe.token": "t0k2"}):
        read = spark_conf(spark)
        assert read == {k: v for k, v in spark.conf.getAll.items()
                        if k.startswith("spark.sql.catalog.")}
        assert read["spark.sql.catalog.probe.uri"] == odd
        spec = find_catalog("probe", spark=spark, url=URL)
        assert (spec.origin, spec.props["uri"], spec.props["token"]) == ("spark", odd, "t0k2")
    assert "spark.sql.catalog.probe.uri" not in spark_conf(spark)


def test_an_argument_comes_before_everything(tmp_path: Path):
    table = TableName.parse("house.db.t")
    catalog = SqlCatalog("house", uri=f"sqlite:///{tmp_path / 'c.db'}",
                         warehouse=f"file://{tmp_path}")
    assert resolve_catalog(table, catalog) is catalog
    assert resolve_catalog(table, {"house": catalog}) is catalog
    spec = CatalogSpec("house", {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}",
                                 "warehouse": f"file://{tmp_path}"})
    assert resolve_catalog(table, spec).name == "house"
    assert resolve_catalog(table, {"house": spec}) is resolve_catalog(table, spec)  # cached
    with pytest.raises(ValueError, match="names catalog 'house'"):
        resolve_catalog(table, CatalogSpec("lake", {"type": "in-memory"}))


def test_a_spec_is_plain_picklable_data():
    spec = CatalogSpec.metaservice("house", URL, "s3cret")
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert hash(spec) == hash(CatalogSpec("house", dict(spec.properties), "metaservice"))


def test_spark_jdbc_catalogs_are_pyiceberg_sql_catalogs_on_the_same_tables(tmp_path: Path):
    """Iceberg's JDBC catalog and pyiceberg's SQL catalog keep tables in the same
    ``iceberg_tables`` table: Spark's JDBC settings open the tables Spark sees."""
    db, warehouse = tmp_path / "catalog.db", tmp_path / "wh"
    warehouse.mkdir()
    written = SqlCatalog("house", uri=f"sqlite:///{db}", warehouse=f"file://{warehouse}")
    written.create_namespace("db")
    written.create_table("db.t", schema=Schema(NestedField(1, "id", LongType())))
    conf = {"spark.sql.catalog.house": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.house.type": "jdbc",
            "spark.sql.catalog.house.uri": f"jdbc:sqlite:{db}",
            "spark.sql.catalog.house.warehouse": str(warehouse)}
    spec = find_catalog("house", conf=conf, url=URL)
    assert spec.props == {"type": "sql", "uri": f"sqlite:///{db}",
                          "warehouse": f"file://{warehouse}"}
    assert spec.load().load_table("db.t").schema().column_names == ["id"]


def test_spark_settings_map_to_pyiceberg_properties():
    pg = CatalogSpec.from_spark_conf("lake", {
        "spark.sql.catalog.lake.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "spark.sql.catalog.lake.uri": "jdbc:postgresql://db.example:5432/iceberg",
        "spark.sql.catalog.lake.jdbc.user": "spark",
        "spark.sql.catalog.lake.jdbc.password": "p@ss",
        "spark.sql.catalog.lake.warehouse": "s3://bucket/wh",
        "spark.sql.catalog.lake.s3.endpoint": "http://minio:9000"})
    assert pg is not None and pg.props == {
        "type": "sql", "uri": "postgresql+psycopg://spark:p%40ss@db.example:5432/iceberg",
        "warehouse": "s3://bucket/wh", "s3.endpoint": "http://minio:9000"}
    hive = CatalogSpec.from_spark_conf("lake", {"spark.sql.catalog.lake.type": "hive",
                                                "spark.sql.catalog.lake.uri": "thrift://h:9083"})
    assert hive is not None and hive.props == {"type": "hive", "uri": "thrift://h:9083"}
    # a session catalog name alone, or settings without a type, configure nothing
    assert CatalogSpec.from_spark_conf("lake", {"spark.sql.catalog.lake.uri": "x"}) is None


@pytest.mark.parametrize("setting", [
    {"spark.sql.catalog.lake.type": "hadoop", "spark.sql.catalog.lake.warehouse": "/wh"},
    {"spark.sql.catalog.lake.catalog-impl": "com.example.MyCatalog"},
    {"spark.sql.catalog.lake.type": "jdbc",
     "spark.sql.catalog.lake.uri": "jdbc:mysql://h/db"},
])
def test_catalogs_pyiceberg_cannot_open_are_refused_clearly(setting):
    with pytest.raises(sp.CatalogConfigError, match="lake") as excinfo:
        find_catalog("lake", conf=setting, url=URL)
    assert isinstance(excinfo.value, ValueError)
