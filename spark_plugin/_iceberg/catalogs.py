"""Which pyiceberg catalog holds a table: found by the table's first name part.

Tables are named ``<catalog>.<database>.<table>``. The catalog called ``<catalog>`` is, in this
order of precedence (the first that applies wins):

1. the ``catalog`` argument of the call: a pyiceberg ``Catalog``, a :class:`CatalogSpec`, or a
   mapping of catalog names to either;
2. Spark's configuration of the session: ``spark.sql.catalog.<catalog>.*``, the keys of the
   Iceberg Spark runtime (``type=rest`` with ``uri``/``warehouse``/``token``/``credential``,
   ``type=jdbc`` with ``uri=jdbc:...``, ``type=hive``, ``type=glue``, or ``catalog-impl``),
   mapped to pyiceberg's properties (:meth:`CatalogSpec.from_spark_conf`);
3. pyiceberg's own configuration: ``~/.pyiceberg.yaml`` or ``PYICEBERG_CATALOG__<CATALOG>__*``;
4. MetaService's built-in Iceberg REST catalog (docs/contract.md#the-built-in-catalog):
``<server url>/iceberg``, warehouse
   ``<catalog>``, the client's token as its bearer token.

Commits through MetaService's own catalog record their barrier in the catalog's transaction
(:func:`records_barriers`): the plugin does not report them afterwards.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, unquote, urlsplit

from spark_plugin._errors import CatalogConfigError
from spark_plugin._names import TableName, dotted

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

BUILTIN_PATH = "/iceberg"
"""Where MetaService serves its Iceberg REST catalog, under the server URL."""

SPARK_CATALOG_PREFIX = "spark.sql.catalog."

CatalogOrigin = Literal["argument", "spark", "pyiceberg", "metaservice"]

_SECRET_WORDS = ("token", "credential", "password", "secret", "key")

# The Iceberg Spark runtime's catalog implementations pyiceberg can open, as pyiceberg types.
_SPARK_TYPES = {"rest": "rest", "jdbc": "sql", "sql": "sql", "hive": "hive", "glue": "glue",
                "dynamodb": "dynamodb"}
_SPARK_IMPLS = {
    "org.apache.iceberg.rest.RESTCatalog": "rest",
    "org.apache.iceberg.jdbc.JdbcCatalog": "sql",
    "org.apache.iceberg.hive.HiveCatalog": "hive",
    "org.apache.iceberg.aws.glue.GlueCatalog": "glue",
    "org.apache.iceberg.aws.dynamodb.DynamoDbCatalog": "dynamodb",
}
# Spark-only keys that mean nothing to pyiceberg.
_SPARK_ONLY = {"type", "catalog-impl", "default-namespace", "cache-enabled",
               "cache.expiration-interval-ms", "jdbc.user", "jdbc.password", "jdbc.useSSL",
               "jdbc.verifyServerCertificate", "jdbc.schema-version"}


@dataclass(frozen=True)
class CatalogSpec:
    """A named catalog and how to open it: plain, hashable, picklable data.

    Attributes:
        name: the catalog's name, the first part of its tables' names.
        properties: pyiceberg catalog properties (``type``, ``uri``, ``warehouse``, ...), as
            sorted pairs. Empty for a catalog found in pyiceberg's configuration: that is read
            again where the catalog is opened, so its secrets are never copied around.
        origin: where it was found: ``"argument"``, ``"spark"`` (Spark's configuration),
            ``"pyiceberg"`` (pyiceberg's configuration) or ``"metaservice"`` (the built-in
            catalog).

    ``CatalogSpec("lake", {"type": "rest", "uri": ..., "warehouse": "lake"})`` may be passed as
    the ``catalog`` argument of the plugin's functions. ``repr`` hides tokens, credentials and
    passwords.
    """

    name: str
    properties: tuple[tuple[str, str], ...] = field(default=())
    origin: CatalogOrigin = "argument"

    def __post_init__(self) -> None:
        props: Any = self.properties
        pairs = props.items() if isinstance(props, Mapping) else props
        object.__setattr__(self, "properties",
                           tuple(sorted((str(k), str(v)) for k, v in pairs)))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={'***' if any(w in k.lower() for w in _SECRET_WORDS) else v!r}"
                          for k, v in self.properties)
        return f"CatalogSpec({self.name!r}, origin={self.origin!r}{', ' if shown else ''}{shown})"

    @property
    def props(self) -> dict[str, str]:
        return dict(self.properties)

    # -- where a catalog is found ------------------------------------------------------------

    @classmethod
    def metaservice(cls, name: str, url: str, token: str | None = None) -> CatalogSpec:
        """MetaService's built-in catalog: ``<url>/iceberg``, warehouse ``name``."""
        props = {"type": "rest", "uri": url.rstrip("/") + BUILTIN_PATH, "warehouse": name}
        if token:
            props["token"] = token
        return cls(name, tuple(props.items()), "metaservice")

    @classmethod
    def from_spark_conf(cls, name: str, conf: Mapping[str, str]) -> CatalogSpec | None:
        """The catalog ``name`` as Spark's Iceberg runtime would open it from ``conf`` (a
        session's configuration), in pyiceberg's terms; ``None`` when ``conf`` does not
        configure it.

        Raises:
            CatalogConfigError: Spark configures it as a catalog pyiceberg cannot open (a
                Hadoop or in-memory catalog, another implementation).
        """
        prefix = f"{SPARK_CATALOG_PREFIX}{name}"
        keys = {k[len(prefix) + 1:]: str(v) for k, v in conf.items()
                if k.startswith(prefix + ".")}
        impl_class = conf.get(prefix)
        if not keys or not (impl_class or "type" in keys or "catalog-impl" in keys):
            return None
        kind = keys.get("type", "").lower()
        impl = keys.get("catalog-impl", "")
        py_type = _SPARK_TYPES.get(kind) if kind else _SPARK_IMPLS.get(impl)
        if py_type is None:
            what = f"type={kind}" if kind else f"catalog-impl={impl or '?'}"
            raise CatalogConfigError(
                f"Spark configures catalog {name!r} as {what}, which pyiceberg cannot open; "
                "use a REST, JDBC, Hive or Glue catalog (MetaService's own: type=rest, "
                f"uri=<server>/iceberg, warehouse={name}), or configure the catalog for "
                "pyiceberg (PYICEBERG_CATALOG__... or ~/.pyiceberg.yaml) or pass it as the "
                "catalog argument")
        props = {k: v for k, v in keys.items() if k not in _SPARK_ONLY}
        props["type"] = py_type
        if py_type == "sql":
            props["uri"] = _sqlalchemy_url(keys.get("uri", ""), keys.get("jdbc.user"),
                                           keys.get("jdbc.password"), name)
        if "warehouse" in props and props["warehouse"].startswith("/"):
            props["warehouse"] = "file://" + props["warehouse"]
        return cls(name, tuple(props.items()), "spark")

    @classmethod
    def from_pyiceberg_config(cls, name: str) -> CatalogSpec | None:
        """The catalog ``name`` if pyiceberg's configuration (``~/.pyiceberg.yaml``,
        ``PYICEBERG_CATALOG__<NAME>__*``) has it, read now (not when pyiceberg was imported)."""
        from pyiceberg.utils.config import Config

        return cls(name, (), "pyiceberg") if Config().get_catalog_config(name) else None

    # -- opening --------------------------------------------------------------------------------

    def load(self) -> Catalog:
        """The pyiceberg catalog; opened once per process and spec."""
        with _catalogs_lock:
            catalog = _catalogs.get(self)
            if catalog is None:
                catalog = _catalogs[self] = self._open()
            return catalog

    def _open(self) -> Catalog:
        from pyiceberg.catalog import load_catalog
        from pyiceberg.utils.config import Config

        if self.origin == "pyiceberg":
            config = Config().get_catalog_config(self.name)
            if not config:
                raise CatalogConfigError(f"pyiceberg's configuration has no catalog "
                                         f"{self.name!r} in this process")
            # pyiceberg's Config answers its RecursiveDict, which load_catalog accepts as
            # properties but does not declare
            return load_catalog(self.name, **config)  # type: ignore[arg-type]
        return load_catalog(self.name, **self.props)

    def is_metaservice_catalog(self, url: str) -> bool:
        """Whether this is the built-in catalog of the MetaService at ``url``."""
        props = self.props
        return props.get("type") == "rest" and _same_uri(props.get("uri"), url)


_catalogs: dict[CatalogSpec, Catalog] = {}
_catalogs_lock = threading.Lock()


def _same_uri(uri: str | None, server_url: str) -> bool:
    return uri is not None and uri.rstrip("/") == server_url.rstrip("/") + BUILTIN_PATH


def _sqlalchemy_url(jdbc: str, user: str | None, password: str | None, name: str) -> str:
    """A JDBC URL of the Iceberg JDBC catalog as the SQLAlchemy URL of pyiceberg's SQL catalog
    (both keep tables in ``iceberg_tables``)."""
    if not jdbc.startswith("jdbc:"):
        if "://" in jdbc:
            return jdbc  # already a SQLAlchemy URL
        raise CatalogConfigError(f"catalog {name!r}: uri {jdbc!r} is not a JDBC URL")
    rest = jdbc[len("jdbc:"):]
    if rest.startswith("sqlite:"):
        path = rest[len("sqlite:"):].split("?", 1)[0]
        path = path[len("file:"):] if path.startswith("file:") else path
        return f"sqlite:///{path}" if not path.startswith("/") else f"sqlite:////{path[1:]}"
    if rest.startswith("postgresql:"):
        parts = urlsplit(rest)
        query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
        user = user or query.get("user")
        password = password or query.get("password")
        auth = ""
        if user:
            auth = quote(unquote(user), safe="")
            if password:
                auth += ":" + quote(unquote(password), safe="")
            auth += "@"
        return f"postgresql+psycopg://{auth}{parts.netloc}{parts.path}"
    raise CatalogConfigError(f"catalog {name!r}: pyiceberg's SQL catalog cannot open {jdbc!r} "
                             "(supported: jdbc:sqlite:, jdbc:postgresql:)")


def spark_conf(spark: Any = None) -> dict[str, str]:
    """The catalog settings (``spark.sql.catalog.*``) of ``spark``, or of the active session
    when pyspark is in use; empty without a session (Spark's Python workers have none)."""
    if spark is None:
        if "pyspark.sql" not in sys.modules:
            return {}
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            return {}
    try:
        everything = _all_settings(spark)
    except Exception:  # noqa: BLE001 - a stopped session: no configuration to read
        return {}
    return {k: str(v) for k, v in everything.items() if k.startswith(SPARK_CATALOG_PREFIX)}


def _all_settings(spark: Any) -> dict[str, Any]:
    """Every setting of ``spark``'s session. A session in this process's JVM hands them over as
    one JSON document (pyspark's ``conf.getAll`` makes a Py4J round trip per setting and ends
    on a converted Java exception: ~25 ms on each catalog lookup); a Spark Connect session in
    one call of its own."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return dict(spark.conf.getAll)
    from py4j.java_gateway import JavaClass

    mapper = JavaClass("com.fasterxml.jackson.databind.ObjectMapper",
                       spark.sparkContext._gateway._gateway_client)()
    return dict(json.loads(mapper.writeValueAsString(jsession.conf().getAllAsJava())))


def find_catalog(name: str, *, spark: Any = None, conf: Mapping[str, str] | None = None,
                 url: str | None = None, token: str | None = None) -> CatalogSpec:
    """The catalog called ``name`` when no argument names it: Spark's configuration (``conf``,
    else that of ``spark`` or the active session), pyiceberg's configuration, else the built-in
    catalog of the MetaService at ``url`` (default ``$METASERVICE_URL``, else the client's
    default) with ``token`` (default ``$METASERVICE_TOKEN``)."""
    found = CatalogSpec.from_spark_conf(name, spark_conf(spark) if conf is None else conf)
    if found is None:
        found = CatalogSpec.from_pyiceberg_config(name)
    if found is None:
        from spark_plugin._client import DEFAULT_URL

        url = url or os.environ.get("METASERVICE_URL") or DEFAULT_URL
        if token is None:
            token = os.environ.get("METASERVICE_TOKEN") or None
        found = CatalogSpec.metaservice(name, url, token)
    return found


def resolve_catalog(table: TableName, catalog: Any = None, *, spark: Any = None,
                    client: Any = None) -> Catalog:
    """The pyiceberg catalog holding ``table``.

    Args:
        table: the table; its first part names the catalog.
        catalog: a pyiceberg ``Catalog`` (its name must be the table's catalog part), a
            :class:`CatalogSpec`, a mapping from catalog names to either, or ``None`` to find
            the catalog by name (:func:`find_catalog`).
        spark: the session whose configuration may name the catalog.
        client: the MetaService client whose server and token the built-in catalog uses.

    Raises:
        ValueError: the catalog given does not match the table's catalog part.
        CatalogConfigError: the catalog is configured as one pyiceberg cannot open.
    """
    if isinstance(catalog, Mapping):
        try:
            catalog = catalog[table.catalog]
        except KeyError:
            raise ValueError(f"no catalog {table.catalog!r} among {sorted(catalog)} "
                             f"for table {table}") from None
    if catalog is None:
        url, token = _client_url_token(client)
        catalog = find_catalog(table.catalog, spark=spark, url=url, token=token)
    if isinstance(catalog, CatalogSpec):
        if catalog.name != table.catalog:
            raise ValueError(f"table {table} names catalog {table.catalog!r}, but the catalog "
                             f"passed is {catalog.name!r}")
        return catalog.load()
    name = getattr(catalog, "name", None)
    if name != table.catalog:
        raise ValueError(f"table {table} names catalog {table.catalog!r}, but the catalog passed "
                         f"is {name!r}: tables are named <catalog>.<database>.<table>")
    return catalog


def _client_url_token(client: Any) -> tuple[str | None, str | None]:
    if client is None:
        return None, None
    return client.base_url, getattr(client, "_token", None)


def load_catalog_by_name(name: str) -> Catalog:
    """The catalog called ``name`` found as :func:`find_catalog` does, opened once per process."""
    return find_catalog(name).load()


def load_table(table: str | TableName, catalog: Any = None, *, spark: Any = None,
               client: Any = None) -> Table:
    """Load an Iceberg table named ``catalog.database.table`` (see :func:`resolve_catalog`)."""
    name = TableName.parse(table)
    return resolve_catalog(name, catalog, spark=spark, client=client).load_table(name.identifier)


CREDENTIALS_EXPIRE_AT_MS = "s3.session-token-expires-at-ms"
"""The FileIO property in which a catalog that vends credentials says when they end."""

CREDENTIALS_RENEWAL_MARGIN_S = 400
"""A table held across reads and writes is loaded again when less than this is left of its
vended credentials (:func:`with_fresh_credentials`). MetaService's catalog vends sessions of at
least 900 s and hands out a new one once half of one's life is gone: below 400 s a load always
brings a new session, so a held table is loaded again once per session, and every read or write
starts with at least 400 s of credentials."""


def with_fresh_credentials(table: Table, *, now: float | None = None) -> Table:
    """``table``, loaded again first (``refresh``: its newest metadata and its catalog's newest
    credentials) when its vended credentials end within :data:`CREDENTIALS_RENEWAL_MARGIN_S` of
    ``now`` (unix seconds; default the clock's). A table without vended credentials, or with
    more than that left of them, is returned as it is."""
    expires = (getattr(table.io, "properties", None) or {}).get(CREDENTIALS_EXPIRE_AT_MS)
    try:
        expires_at_s = int(str(expires)) / 1000
    except ValueError:  # none vended (or not a time)
        return table
    if expires_at_s - (time.time() if now is None else now) < CREDENTIALS_RENEWAL_MARGIN_S:
        table.refresh()
    return table


def qualified_name(table: Table) -> str:
    """``catalog.database.table`` of a pyiceberg table, as :class:`TableName` writes it (a
    namespace of several levels one part each, a part beyond letters, digits, ``_`` and ``-``
    in backticks). pyiceberg's identifier of a table is its namespace's levels, then its name,
    without the catalog's."""
    return dotted(table.catalog.name, *table.name())


def records_barriers(table: Table, url: str) -> bool:
    """Whether commits to ``table`` record their barrier themselves: its catalog is the built-in
    catalog of the MetaService at ``url`` (a REST catalog at ``<url>/iceberg``), which records a
    tagged commit's barrier in the same transaction (docs/contract.md#commits-through-the-catalog),
    so no report follows."""
    from pyiceberg.catalog.rest import RestCatalog

    catalog = table.catalog
    return isinstance(catalog, RestCatalog) and _same_uri(catalog.properties.get("uri"), url)
