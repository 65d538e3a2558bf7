"""OpenLineage's vocabulary (pure): run ids, dataset names, the schema versions declared."""

from __future__ import annotations

import copy
import uuid

import pytest

from metaservice import openlineage as ol
from tests.metaservice.lineage.openlineage_checks import check_with_client_models

NAMING = ol.Naming(job_namespace="prod", catalog_name="lake",
                   catalog_uri="https://meta.example:8000/iceberg",
                   warehouse_uri="s3://bucket/warehouse", producer="urn:metaservice:test",
                   barrier_facet_schema_url="https://meta.example:8000/facet.json#/$defs/F")


def test_a_run_id_is_a_uuidv7_timed_at_the_barrier_and_stable() -> None:
    barrier = 1_700_000_123_456
    first = ol.run_id("prod", "job", barrier, 3, 1)
    parsed = uuid.UUID(first)
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert int.from_bytes(parsed.bytes[:6], "big") == barrier
    assert ol.run_id("prod", "job", barrier, 3, 1) == first
    others = {ol.run_id("prod", "job", barrier, 3, 2), ol.run_id("prod", "job", barrier, 4, 1),
              ol.run_id("prod", "job", barrier + 1, 3, 1), ol.run_id("dev", "job", barrier, 3, 1),
              ol.run_id("prod", "other", barrier, 3, 1)}
    assert first not in others and len(others) == 5
    assert ol.run_id("prod", "job", 1000, 1, 1) < ol.run_id("prod", "job", 2000, 1, 1)


@pytest.mark.parametrize(("location", "identity"), [
    ("file:///warehouse/db/t", ("file", "/warehouse/db/t")),
    ("/warehouse/db/t/", ("file", "/warehouse/db/t")),
    ("s3://bucket/warehouse/db/t", ("s3://bucket", "warehouse/db/t")),
    ("s3a://bucket/warehouse/db/t", ("s3://bucket", "warehouse/db/t")),
    ("gs://bucket/db/t", ("gs://bucket", "db/t")),
    ("abfs://c@acct.dfs.core.windows.net/db/t", ("abfss://c@acct.dfs.core.windows.net", "db/t")),
    ("hdfs://namenode:8020/warehouse/db/t", ("hdfs://namenode:8020", "/warehouse/db/t")),
    # a location holds a table's parts as they are: '?' and '#' are in its path, not a query
    ("file:///warehouse/sales dept/eu.west/orders été",
     ("file", "/warehouse/sales dept/eu.west/orders été")),
    ("s3://bucket/wh/q?1/t#2", ("s3://bucket", "wh/q?1/t#2")),
    ("/warehouse/db/t#2", ("file", "/warehouse/db/t#2")),
    ("hdfs://nn/wh/a?b=c/t", ("hdfs://nn", "/wh/a?b=c/t")),
])
def test_a_location_is_named_as_openlineage_names_stored_datasets(
        location: str, identity: tuple[str, str]) -> None:
    assert ol.location_identity(location) == identity


def test_a_table_is_named_by_location_with_its_catalog_name_as_symlink() -> None:
    symlink = ("https://meta.example:8000/iceberg", "db.t")
    assert ol.dataset_identity("lake.db.t", "s3://bucket/warehouse/db/t", NAMING) == \
        ol.DatasetIdentity("s3://bucket", "warehouse/db/t", symlink)
    assert ol.dataset_identity("lake.db.t", None, NAMING) == ol.DatasetIdentity(*symlink, symlink)
    assert ol.dataset_identity("other.db.t", None, NAMING) == \
        ol.DatasetIdentity("iceberg://other", "db.t")


def test_a_table_of_a_nested_namespace_is_named_by_its_quoted_dotted_name() -> None:
    table = "lake.`sales dept`.`eu.west`.`orders été`"
    in_catalog = "`sales dept`.`eu.west`.`orders été`"
    symlink = ("https://meta.example:8000/iceberg", in_catalog)
    location = "s3://bucket/warehouse/sales dept/eu.west/orders été"
    assert ol.dataset_identity(table, location, NAMING) == ol.DatasetIdentity(
        "s3://bucket", "warehouse/sales dept/eu.west/orders été", symlink)
    assert ol.dataset_identity(table, None, NAMING) == ol.DatasetIdentity(*symlink, symlink)
    assert ol.dataset_identity("other.a.b.t", None, NAMING) == \
        ol.DatasetIdentity("iceberg://other", "a.b.t")
    # two levels (a, b) and one level "a.b" are two tables, and two names
    assert ol.dataset_identity("other.`a.b`.t", None, NAMING).name == "`a.b`.t"


def test_the_schema_versions_are_those_the_client_declares() -> None:
    from openlineage.client.event_v2 import RunEvent
    from openlineage.client.facet_v2 import (
        catalog_dataset,
        dataset_version_dataset,
        error_message_run,
        job_type_job,
        nominal_time_run,
        symlinks_dataset,
    )

    assert RunEvent._get_schema() == ol.RUN_EVENT_SCHEMA
    assert dataset_version_dataset.DatasetVersionDatasetFacet._get_schema() == \
        ol.VERSION_FACET_SCHEMA
    assert symlinks_dataset.SymlinksDatasetFacet._get_schema() == ol.SYMLINKS_FACET_SCHEMA
    assert catalog_dataset.CatalogDatasetFacet._get_schema() == ol.CATALOG_FACET_SCHEMA
    assert error_message_run.ErrorMessageRunFacet._get_schema() == ol.ERROR_FACET_SCHEMA
    assert nominal_time_run.NominalTimeRunFacet._get_schema() == ol.NOMINAL_TIME_FACET_SCHEMA
    assert job_type_job.JobTypeJobFacet._get_schema() == ol.JOB_TYPE_FACET_SCHEMA


def failed_run() -> dict:
    run = ol.BarrierRun(job="j", barrier=3000, metaservice_job="j", job_run=2, attempt=1,
                        previous_barrier=2000,
                        inputs=[ol.SourceRead("lake.db.src", 3000, 13, 2000, 12),
                                ol.SourceRead("other.db.dim", 2500, 7)],
                        outputs=[ol.SinkWritten("lake.db.mid", None)])
    return ol.run_event("FAIL", run, event_time_ms=3500, naming=NAMING,
                        locations={"lake.db.src": "s3://bucket/warehouse/db/src"},
                        reason="executor lost")


def test_an_event_is_what_the_client_s_classes_make_of_it() -> None:
    event = failed_run()
    check_with_client_models(event, {ol.BARRIER_FACET})
    assert event["eventTime"] == "1970-01-01T00:00:03.500Z"
    assert event["run"]["facets"]["nominalTime"]["nominalStartTime"] == \
        "1970-01-01T00:00:02.000Z"
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [
        ("s3://bucket", "warehouse/db/src"), ("iceberg://other", "db.dim")]
    assert "catalog" not in event["inputs"][1]["facets"]  # not the built-in REST catalog


@pytest.mark.parametrize("corrupt", [
    lambda e: e["inputs"][0]["facets"]["version"].pop("datasetVersion"),
    lambda e: e["inputs"][0]["facets"]["version"].update(version="13"),
    lambda e: e["run"].update(runId="run-3000"),
    lambda e: e["run"]["facets"]["errorMessage"].update(
        _schemaURL=ol.ERROR_FACET_SCHEMA.replace("1-0-1", "1-0-0")),
    lambda e: e["job"]["facets"]["jobType"].pop("integration"),
    lambda e: e.update(eventType="ABORTED"),
    lambda e: e["outputs"][0].update(extra=1),
])
def test_the_client_model_check_refuses_an_event_the_client_would_not_make(corrupt) -> None:  # type: ignore[no-untyped-def]
    event = copy.deepcopy(failed_run())
    corrupt(event)
    with pytest.raises((AssertionError, TypeError, ValueError, KeyError)):
        check_with_client_models(event, {ol.BARRIER_FACET})
