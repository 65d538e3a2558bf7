"""Iceberg through pyiceberg, without Spark: maintenance tools, Structured Streaming executors
and the batch job all build on this package. One module per idea:

- ``catalogs``  which catalog holds a table (argument, Spark's configuration, pyiceberg's
                configuration, MetaService's built-in catalog) and :class:`CatalogSpec`; a
                held table's vended credentials renewed before they end;
- ``markers``   how a commit names its job (or root label) and barrier, and how a replay finds
                it on the table's lineage or in its properties;
- ``commits``   data files, and one tagged commit per barrier, exactly once;
- ``reads``     read plans for exact snapshots (or the rows appended between two).
"""

from spark_plugin._iceberg.catalogs import (
    BUILTIN_PATH,
    CatalogSpec,
    find_catalog,
    load_catalog_by_name,
    load_table,
    qualified_name,
    records_barriers,
    resolve_catalog,
    spark_conf,
    with_fresh_credentials,
)
from spark_plugin._iceberg.commits import (
    SinkCommit,
    barrier_committed,
    commit_sink,
    data_files_from_arrow,
    data_files_from_batches,
    data_files_from_footers,
    data_files_from_parquet,
    data_location,
    delete_files_quietly,
    refusal,
)
from spark_plugin._iceberg.markers import (
    BARRIER_PROPERTY,
    JOB_PROPERTY,
    ROOT_LABEL_PROPERTY,
    LastCommit,
    ancestors,
    committer,
    last_commit_of,
    marker_property,
    tagged_snapshots,
)
from spark_plugin._iceberg.reads import (
    ReadMethod,
    ReadPlan,
    appended_snapshots,
    choose_read_method,
    plan_appended_read,
    plan_snapshot_read,
    read_arrow,
    scan_tasks,
    snapshot_schema,
    unsupported_columns,
)

__all__ = [
    "BARRIER_PROPERTY",
    "BUILTIN_PATH",
    "CatalogSpec",
    "JOB_PROPERTY",
    "LastCommit",
    "ROOT_LABEL_PROPERTY",
    "ReadMethod",
    "ReadPlan",
    "SinkCommit",
    "ancestors",
    "appended_snapshots",
    "barrier_committed",
    "choose_read_method",
    "commit_sink",
    "committer",
    "data_files_from_arrow",
    "data_files_from_batches",
    "data_files_from_footers",
    "data_files_from_parquet",
    "data_location",
    "delete_files_quietly",
    "find_catalog",
    "last_commit_of",
    "load_catalog_by_name",
    "load_table",
    "marker_property",
    "plan_appended_read",
    "plan_snapshot_read",
    "qualified_name",
    "read_arrow",
    "records_barriers",
    "refusal",
    "resolve_catalog",
    "scan_tasks",
    "snapshot_schema",
    "spark_conf",
    "tagged_snapshots",
    "unsupported_columns",
    "with_fresh_credentials",
]
