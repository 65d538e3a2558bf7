"""The plugin's JVM part (``jvm/``, built by ``bash engines/plugin-jvm/install.sh``): where its
jars are, and whether a session's JVM has them.

Two jars: the plugin's own (``metaservice-spark-plugin.jar``: the ``metaservice_native``
streaming source, the writer of tables on an object store, the files' layout as a table's
properties say) and, beside it, Apache Iceberg's AWS
bundle (the AWS SDK v2 the writer uploads with). A session names both in ``spark.jars``
(:func:`plugin_jars`); Spark ships them to executors. Without them everything still works: the
native source is not registered, object-store tables are written by pyiceberg in Spark's
Python workers, and Spark's writer of tables on a filesystem takes only the table's codec.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

PLUGIN_JAR = "metaservice-spark-plugin.jar"
AWS_BUNDLE_GLOB = "iceberg-aws-bundle-*.jar"
S3_CLIENT_CLASS = "software.amazon.awssdk.services.s3.S3Client"


def plugin_jar() -> Path:
    """The plugin's jar: ``$METASERVICE_PLUGIN_JAR``, else the one ``bash
    engines/plugin-jvm/install.sh`` builds in this checkout.

    Raises:
        FileNotFoundError: no jar there (the message says how to build it).
    """
    configured = os.environ.get("METASERVICE_PLUGIN_JAR")
    jar = Path(configured) if configured else (
        Path(__file__).resolve().parents[1] / ".cache" / "jars" / "plugin-jvm" / PLUGIN_JAR)
    if not jar.is_file():
        raise FileNotFoundError(f"{jar}: the plugin's jar is not built; run `bash "
                                "engines/plugin-jvm/install.sh` (Maven, Java 17), or set "
                                "METASERVICE_PLUGIN_JAR to the jar")
    return jar


def plugin_jars() -> str:
    """What to put in ``spark.jars`` when the session is built: the plugin's jar and the AWS
    bundle installed beside it (when it is there), comma-separated.

    Raises:
        FileNotFoundError: the plugin's jar is not built.
    """
    jar = plugin_jar()
    bundles = sorted(jar.parent.glob(AWS_BUNDLE_GLOB))
    return ",".join(str(p) for p in [jar, *bundles[-1:]])


_writers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def object_store_writer(spark: Any) -> Any | None:
    """The JVM class ``io.metaservice.spark.ObjectStoreWriter`` of ``spark``'s driver, or
    ``None`` when the session has no JVM of its own (Spark Connect) or its classpath lacks the
    plugin's jar or the AWS SDK (looked up once per SparkContext)."""
    context = getattr(spark, "_sc", None)
    if context is None or getattr(spark, "_jsparkSession", None) is None:
        return None
    if context not in _writers:
        _writers[context] = _find_writer(context._jvm)
    return _writers[context]


def _find_writer(jvm: Any) -> Any | None:
    from py4j.java_gateway import JavaClass
    from py4j.protocol import Py4JJavaError

    writer = jvm.io.metaservice.spark.ObjectStoreWriter
    if not isinstance(writer, JavaClass):
        return None
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        jvm.java.lang.Class.forName(S3_CLIENT_CLASS, False, loader)
    except Py4JJavaError:
        return None
    return writer


def parquet_layout_settings(spark: Any, table_properties: str) -> dict[str, str] | None:
    """parquet-mr's Hadoop settings that lay files out as a table with these properties
    (lines of ``key \t value``) says (``io.metaservice.spark.ParquetLayout.hadoopSettings``),
    or ``None`` when ``spark``'s driver has no JVM of its own or no plugin jar.

    Raises:
        py4j.protocol.Py4JJavaError: a property is not a valid value (its message names it).
    """
    from py4j.java_gateway import JavaClass
    from py4j.protocol import Py4JError, Py4JJavaError

    context = getattr(spark, "_sc", None)
    if context is None or getattr(spark, "_jsparkSession", None) is None:
        return None
    layout = context._jvm.io.metaservice.spark.ParquetLayout
    if not isinstance(layout, JavaClass):
        return None
    try:
        answer = layout.hadoopSettings(table_properties)
    except Py4JJavaError:
        raise
    except Py4JError:  # a jar older than the method: as without the jar
        return None
    return dict(line.split("\t", 1) for line in str(answer).splitlines() if "\t" in line)
