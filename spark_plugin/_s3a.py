"""Tables on S3 for Spark's own Parquet reader and writer: Hadoop's S3A filesystem.

Iceberg names object-store files ``s3://bucket/key``; Hadoop serves that scheme only through
S3A, as ``s3a://bucket/key`` (``hadoop-aws`` and the AWS SDK bundle on the classpath: profile
``plugin-s3`` of engines/pom.xml). Paths handed to Spark are spelled ``s3a://``
(:func:`hadoop_path`); paths Spark answers are spelled back as the table spells them
(:func:`table_path`), so that manifests keep ``s3://`` for every other engine.

The credentials are those of the table's FileIO: for a table loaded through a REST catalog
that vends them (``X-Iceberg-Access-Delegation: vended-credentials``, pyiceberg's default),
the temporary ones the catalog handed out for that table's prefix. :func:`hadoop_options`
turns them into S3A's per-bucket settings (``fs.s3a.bucket.<bucket>.*``), given to Spark as
options of the one read or write: Spark's file sources copy a job's options into the Hadoop
configuration of that job, which travels to the executors inside the job (a serialized
configuration, never the executors' environment), so executors of a cluster whose workers hold
no AWS variables write and read with exactly the table's credentials. Spark redacts these keys
(``access.key``, ``secret``, ``token``) in plans and UIs; nothing here logs them.

A write into S3 commits its tasks with ``FileOutputCommitter``'s algorithm 2
(:data:`OBJECT_STORE_WRITE_OPTIONS`): each task's files are renamed once, by the task, into the
write's directory, instead of twice with the job's commit renaming every file serially on the
driver (a rename on S3 is a copy and a delete). Algorithm 2's weakness, a job's output visible
before the job commits, does not matter here: the directory is fresh and nothing reads it until
the Iceberg commit names its files; Spark lets one attempt of a task commit, and a retried
attempt writes the same file names.

Hadoop caches one filesystem per bucket and process: with credentials that differ by table and
expire, a cached filesystem would keep the first table's. The options turn the cache off for
``s3a`` in that job (``fs.s3a.impl.disable.cache``), so each job's filesystems are built from its
own configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pyiceberg.table import Table

OBJECT_STORE_SCHEMES = ("s3", "s3a", "s3n")
"""How Iceberg spells S3 locations; Hadoop serves them all as ``s3a``."""

TEMPORARY_PROVIDER = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
SIMPLE_PROVIDER = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"

OBJECT_STORE_WRITE_OPTIONS = {"mapreduce.fileoutputcommitter.algorithm.version": "2"}
"""Hadoop options of a Spark write into S3 (see the module docstring)."""

# pyiceberg's FileIO property → S3A's per-bucket key (fs.s3a.bucket.<bucket>.<key>)
_S3A_KEYS = {
    "s3.endpoint": "endpoint",
    "s3.region": "endpoint.region",
    "s3.access-key-id": "access.key",
    "s3.secret-access-key": "secret.key",
    "s3.session-token": "session.token",
}


def is_object_store(location: str) -> bool:
    """Whether ``location`` is an S3 location (``s3://``, ``s3a://``, ``s3n://``)."""
    return urlsplit(location).scheme in OBJECT_STORE_SCHEMES


def hadoop_path(location: str) -> str:
    """``location`` as Hadoop opens it: ``s3://b/k`` → ``s3a://b/k``; others unchanged."""
    parts = urlsplit(location)
    if parts.scheme in OBJECT_STORE_SCHEMES and parts.scheme != "s3a":
        return "s3a" + location[len(parts.scheme):]
    return location


def table_path(path: str, like: str) -> str:
    """A path Spark answered, spelled as the table location ``like`` is: ``s3a://`` back to
    ``like``'s S3 scheme, ``file:/x`` as ``file:///x`` when ``like`` is spelled so, and as the
    bare local path ``/x`` when ``like`` is one. A bare path is how pyiceberg writes the files
    of a table whose location is one, and how it reads a path holding a table name's ``#`` or
    ``?`` whole (it reads a ``file:`` path as a URL, whose fragment or query it drops)."""
    scheme = urlsplit(like).scheme
    if scheme in OBJECT_STORE_SCHEMES and urlsplit(path).scheme in OBJECT_STORE_SCHEMES:
        return scheme + path[len(urlsplit(path).scheme):]
    local = path.startswith("file:/") and not path.startswith("file://")
    if like.startswith("file:///") and local:
        return "file://" + path[len("file:"):]
    if not scheme and like.startswith("/") and local:
        return path[len("file:"):]
    return path


def hadoop_options(io_properties: Mapping[str, str], *locations: str) -> dict[str, str]:
    """The Hadoop settings a Spark job needs to read or write under ``locations`` with the
    FileIO properties ``io_properties`` (pyiceberg's ``s3.*``): for each bucket, S3A's
    endpoint, region, path-style access and credentials; and no filesystem cache. Empty when
    no location is on S3.

    Without credentials in ``io_properties`` none are set: S3A then finds its own (its
    configuration, the environment, an instance profile)."""
    buckets = sorted({urlsplit(loc).netloc for loc in locations if is_object_store(loc)})
    if not buckets:
        return {}
    per_bucket = {key: str(io_properties[prop]) for prop, key in _S3A_KEYS.items()
                  if io_properties.get(prop)}
    path_style = io_properties.get("s3.path-style-access")
    if path_style is not None:
        per_bucket["path.style.access"] = str(path_style).lower()
    if str(io_properties.get("s3.endpoint", "")).startswith("http://"):
        per_bucket["connection.ssl.enabled"] = "false"
    if io_properties.get("s3.access-key-id") and io_properties.get("s3.secret-access-key"):
        per_bucket["aws.credentials.provider"] = (
            TEMPORARY_PROVIDER if io_properties.get("s3.session-token") else SIMPLE_PROVIDER)
    options = {"fs.s3a.impl.disable.cache": "true"}
    for bucket in buckets:
        options.update({f"fs.s3a.bucket.{bucket}.{key}": value
                        for key, value in per_bucket.items()})
    return options


def table_hadoop_options(table: Table, *locations: str) -> dict[str, str]:
    """:func:`hadoop_options` with ``table``'s FileIO properties, for ``locations`` (default:
    the table's location)."""
    properties = getattr(table.io, "properties", {}) or {}
    return hadoop_options({str(k): str(v) for k, v in properties.items()},
                          *(locations or (table.location(),)))
