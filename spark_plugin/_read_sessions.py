"""Consistent reads in Spark SQL through a read session of one of the catalog's consistent
warehouses (``lake@strong``, ``lake@barrier=<B>``; docs/contract.md#consistent-warehouses), for
Spark with Apache Iceberg's Spark runtime: one call opens a new read session under a fixed catalog
name."""

from __future__ import annotations

import re
import warnings
from typing import Any

from spark_plugin._errors import CatalogConfigError

_AT = re.compile(r"^(strong|barrier=(0|[1-9][0-9]{0,18}))$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def open_read_session(spark: Any, name: str = "lake_strong", *, catalog: str = "lake",
                      at: str = "strong") -> str:
    """Point the Spark catalog ``name`` at a new read session of the consistent warehouse
    ``<warehouse>@<at>`` (``at`` is ``strong`` or ``barrier=<B>``) of MetaService's catalog,
    which Spark knows as ``catalog``; answers ``name``.

    Every table of a pipeline read through ``name`` — in one query and in every later one — is
    at one barrier, fixed by the first table of the pipeline the session loads; call again to
    read newer data. The session's catalog copies ``spark.sql.catalog.<catalog>.*`` (type, uri,
    token…) with the warehouse ``<warehouse>@<at>``. Spark keeps the catalogs it has loaded,
    so a call asks it to forget them: the next query loads them again (the current catalog and
    namespace set by ``USE`` return to Spark's defaults).

    Raises:
        CatalogConfigError: ``catalog`` is not a catalog of Spark's configuration, ``at`` or
            the name is not valid, or the session is a Spark Connect session.
    """
    if not _AT.match(at):
        raise CatalogConfigError(f"unknown consistent warehouse @{at!r}: use 'strong' or "
                                 "'barrier=<B>'")
    if not _NAME.match(name) or name == catalog:
        raise CatalogConfigError(f"invalid read session catalog name {name!r}: a Spark "
                                 f"identifier other than {catalog!r}")
    base = f"spark.sql.catalog.{catalog}"
    settings = {row[0]: row[1] for row in spark.sql("SET").collect()}
    implementation = settings.get(base)
    if implementation is None:
        raise CatalogConfigError(
            f"Spark has no catalog {catalog!r} ({base} is not set): configure MetaService's "
            f"catalog first, e.g. {base}=org.apache.iceberg.spark.SparkCatalog, {base}.type=rest, "
            f"{base}.uri=http://host:8000/iceberg, {base}.warehouse=lake")
    options = {key[len(base) + 1:]: value for key, value in settings.items()
               if key.startswith(base + ".")}
    warehouse = options.pop("warehouse", catalog).split("@", 1)[0]
    target = f"spark.sql.catalog.{name}"
    for key in [k for k in settings if k.startswith(target + ".")]:
        spark.conf.unset(key)
    spark.conf.set(target, implementation)
    for key, value in options.items():
        spark.conf.set(f"{target}.{key}", value)
    spark.conf.set(f"{target}.warehouse", f"{warehouse}@{at}")
    jvm_session = getattr(spark, "_jsparkSession", None)
    if jvm_session is None:
        raise CatalogConfigError("open_read_session needs a classic SparkSession (not Spark "
                                 "Connect): start a new session to read newer data instead")
    jvm_session.sessionState().catalogManager().reset()
    return name


def open_view(spark: Any, name: str = "lake_strong", *, catalog: str = "lake",
              view: str = "strong") -> str:
    """Deprecated: ``open_read_session(spark, name, catalog=catalog, at=view)``, under its
    former name (the catalog now serves Iceberg views, the SQL objects, too)."""
    warnings.warn("spark_plugin.open_view is deprecated: use "
                  "spark_plugin.open_read_session(spark, name, catalog=..., at=...)",
                  DeprecationWarning, stacklevel=2)
    return open_read_session(spark, name, catalog=catalog, at=view)
