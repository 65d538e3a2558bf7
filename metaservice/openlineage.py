"""OpenLineage's vocabulary for what MetaService knows (pure: plain data in, event dicts out).

One OpenLineage *run* is one attempt of one job at one barrier: ``START`` when the barrier is
handed out, ``COMPLETE`` when every sink committed it, ``FAIL`` when the attempt is aborted
(the spec makes ``COMPLETE``/``FAIL`` terminal, and an aborted barrier is handed out again: the
next attempt is a new run). A root report is the ``COMPLETE`` of a run of the table's ingestion
job. The run id is a UUIDv7 whose time is the barrier and whose other bits hash (job, barrier,
job run, attempt): emitting the same run again, from any process, gives the same id.

Datasets are named as OpenLineage's Spark integration names Iceberg tables of a REST catalog:
by their location (``file`` + path, ``s3://bucket`` + key, ``scheme://authority`` + path), with
a ``symlinks`` facet naming the table in its catalog (the catalog's URI, ``database.table``,
type ``TABLE``) and a ``catalog`` facet. A table whose location the server does not know (one
of another catalog, which only the plugin reads) is named by its catalog:
``iceberg://<catalog>``, ``database.table``. ``database.table`` is the table's name inside its
catalog as a dotted name writes it: a namespace of several levels one part each, a part beyond
letters, digits, ``_`` and ``-`` in backticks (``db.t``; ``a.b.t``; `` `sales dept`.`t.v2` ``).

Inputs carry the ``version`` facet of the snapshot the job read at the barrier (``snap(s, B)``,
not the newest), outputs that of the snapshot the job committed. The barrier itself, with the
previous barrier and snapshots an incremental step read from, is MetaService's own run facet,
``metaservice_barrier``, whose JSON schema the server serves (``barrier_facet_schema``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metaservice.names import TableName, dotted_namespace

EventType = Literal["START", "COMPLETE", "FAIL"]

# The schema versions openlineage-python (1.54) declares for what these events carry; a test
# checks them against the installed client's classes.
RUN_EVENT_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
VERSION_FACET_SCHEMA = ("https://openlineage.io/spec/facets/1-0-1/DatasetVersionDatasetFacet.json"
                        "#/$defs/DatasetVersionDatasetFacet")
SYMLINKS_FACET_SCHEMA = ("https://openlineage.io/spec/facets/1-0-1/SymlinksDatasetFacet.json"
                         "#/$defs/SymlinksDatasetFacet")
CATALOG_FACET_SCHEMA = ("https://openlineage.io/spec/facets/1-1-0/CatalogDatasetFacet.json"
                        "#/$defs/CatalogDatasetFacet")
ERROR_FACET_SCHEMA = ("https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json"
                      "#/$defs/ErrorMessageRunFacet")
NOMINAL_TIME_FACET_SCHEMA = ("https://openlineage.io/spec/facets/1-0-1/NominalTimeRunFacet.json"
                             "#/$defs/NominalTimeRunFacet")
JOB_TYPE_FACET_SCHEMA = ("https://openlineage.io/spec/facets/2-0-4/JobTypeJobFacet.json"
                         "#/$defs/JobTypeJobFacet")
BASE_RUN_FACET_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunFacet"

BARRIER_FACET = "metaservice_barrier"
BARRIER_FACET_PATH = "/openlineage/facets/1-0-0/MetaServiceBarrierRunFacet.json"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", re.DOTALL)
INGESTION_SUFFIX = "@ingestion"  # '@' is not allowed in a job id: no MetaService job has it


@dataclass(frozen=True)
class Naming:
    """Where names come from: the deployment's job namespace, the built-in catalog's name and
    REST URI, the producer URI, and the URL of MetaService's barrier facet schema."""

    job_namespace: str
    catalog_name: str
    catalog_uri: str
    warehouse_uri: str | None
    producer: str
    barrier_facet_schema_url: str


@dataclass(frozen=True)
class SourceRead:
    """What a job read of one source at a barrier: ``snap(s, B)`` and, for an incremental step,
    ``snap(s, B_prev)``."""

    table: str
    barrier: int
    snapshot_id: int
    previous_barrier: int | None = None
    previous_snapshot_id: int | None = None


@dataclass(frozen=True)
class SinkWritten:
    table: str
    snapshot_id: int | None  # None until committed (START, FAIL)


@dataclass(frozen=True)
class BarrierRun:
    """One attempt of one job at one barrier, in MetaService's terms."""

    job: str  # the OpenLineage job name
    barrier: int
    inputs: Sequence[SourceRead]
    outputs: Sequence[SinkWritten]
    metaservice_job: str | None = None  # None for an ingestion job
    job_run: int = 0
    attempt: int = 1
    previous_barrier: int | None = None


@dataclass(frozen=True)
class DatasetIdentity:
    namespace: str
    name: str
    symlink: tuple[str, str] | None = None  # (namespace, name) of the table in its catalog


INGESTION_JOB_MAX = 400
"""The longest ingestion job name (the outbox keys its rows by job name); a table whose dotted
name is longer has its name cut and a digest of the whole of it appended."""


def ingestion_job(table: str) -> str:
    """The OpenLineage job of a root table's ingestion (its root reports): ``<table>@ingestion``,
    at most ``INGESTION_JOB_MAX`` characters (a longer name is cut, with a digest of it, so that
    two tables never share a job)."""
    name = f"{table}{INGESTION_SUFFIX}"
    if len(name) <= INGESTION_JOB_MAX:
        return name
    digest = hashlib.sha256(table.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    keep = INGESTION_JOB_MAX - len(INGESTION_SUFFIX) - len(digest) - 1
    return f"{table[:keep]}~{digest}{INGESTION_SUFFIX}"


def run_id(job_namespace: str, job: str, barrier: int, job_run: int, attempt: int) -> str:
    """A UUIDv7 (RFC 9562) whose 48-bit time is the barrier (milliseconds) and whose other 74
    bits hash the rest: the same run always has the same id, and runs sort by barrier."""
    digest = hashlib.sha256(
        "\x00".join((job_namespace, job, str(barrier), str(job_run), str(attempt))).encode()
    ).digest()
    value = ((barrier & 0xFFFF_FFFF_FFFF) << 80) | int.from_bytes(digest[:10], "big")
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=value))


def _split_location(location: str) -> tuple[str, str, str]:
    """(scheme, authority, path) of a location. A table's location is its warehouse's, then
    its namespace's levels and its name as they are, unencoded: a ``?`` or ``#`` there is part
    of the path, not a query or a fragment as a URL parser would take it."""
    found = _SCHEME.match(location)
    scheme, rest = (found.group(1).lower(), found.group(2)) if found else ("", location)
    if not rest.startswith("//"):
        return scheme, "", rest
    authority, slash, path = rest[2:].partition("/")
    return scheme, authority, slash + path


def location_identity(location: str) -> tuple[str, str]:
    """A table location as OpenLineage names a dataset stored there: a local path is
    (``file``, path); an object store (s3, gs, abfss, wasbs) is (``scheme://bucket``, key
    without its leading slash); anything else (``scheme://authority``, path)."""
    scheme, authority, path = _split_location(location)
    path = path.rstrip("/") or "/"
    if scheme in ("", "file"):
        return "file", path
    for prefix, canonical in (("s3", "s3"), ("gs", "gs"), ("abfs", "abfss"), ("wasb", "wasbs")):
        if scheme.startswith(prefix):
            return f"{canonical}://{authority}", path.lstrip("/") or "/"
    return f"{scheme}://{authority}", path


def dataset_identity(table: str, location: str | None, naming: Naming) -> DatasetIdentity:
    """How a table is named: by location when known (with its catalog name as a symlink),
    by its catalog otherwise."""
    name = TableName.parse(table)
    in_catalog = dotted_namespace(name.database, name.table)
    if name.catalog == naming.catalog_name:
        symlink = (naming.catalog_uri, in_catalog)
        if location is None:
            return DatasetIdentity(*symlink, symlink=symlink)
        return DatasetIdentity(*location_identity(location), symlink=symlink)
    return DatasetIdentity(f"iceberg://{name.catalog}", in_catalog)


def iso_time(ms: int) -> str:
    """Milliseconds since the epoch as an ISO-8601 UTC date-time."""
    return (dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"))


def _facet(producer: str, schema: str, **fields: Any) -> dict[str, Any]:
    return {"_producer": producer, "_schemaURL": schema,
            **{k: v for k, v in fields.items() if v is not None}}


def _dataset_facets(table: str, identity: DatasetIdentity, snapshot_id: int | None,
                    naming: Naming) -> dict[str, Any]:
    facets: dict[str, Any] = {}
    if identity.symlink is not None:
        facets["symlinks"] = _facet(naming.producer, SYMLINKS_FACET_SCHEMA, identifiers=[
            {"namespace": identity.symlink[0], "name": identity.symlink[1], "type": "TABLE"}])
    if TableName.parse(table).catalog == naming.catalog_name:  # the built-in REST catalog
        facets["catalog"] = _facet(
            naming.producer, CATALOG_FACET_SCHEMA, framework="iceberg", type="rest",
            name=naming.catalog_name, metadataUri=naming.catalog_uri,
            warehouseUri=naming.warehouse_uri, source="metaservice", catalogProperties={})
    if snapshot_id is not None:
        facets["version"] = _facet(naming.producer, VERSION_FACET_SCHEMA,
                                   datasetVersion=str(snapshot_id))
    return facets


def _barrier_facet(run: BarrierRun, naming: Naming) -> dict[str, Any]:
    return _facet(
        naming.producer, naming.barrier_facet_schema_url,
        barrier=run.barrier, barrierTime=iso_time(run.barrier), job=run.metaservice_job,
        jobRun=run.job_run if run.metaservice_job is not None else None,
        attempt=run.attempt, previousBarrier=run.previous_barrier,
        inputs=[{k: v for k, v in {
            "table": s.table, "barrier": s.barrier, "snapshotId": s.snapshot_id,
            "previousBarrier": s.previous_barrier,
            "previousSnapshotId": s.previous_snapshot_id}.items() if v is not None}
            for s in run.inputs],
        outputs=[{k: v for k, v in {"table": k_.table, "snapshotId": k_.snapshot_id}.items()
                  if v is not None} for k_ in run.outputs])


def run_event(event_type: EventType, run: BarrierRun, *, event_time_ms: int, naming: Naming,
              locations: Mapping[str, str], reason: str | None = None) -> dict[str, Any]:
    """The RunEvent (as its JSON object) of ``run`` moving to ``event_type``.

    ``locations`` maps a table (``c.d.t``) to its location where the server knows it;
    ``reason`` is a ``FAIL``'s.
    """
    run_facets: dict[str, Any] = {
        BARRIER_FACET: _barrier_facet(run, naming),
        "nominalTime": _facet(naming.producer, NOMINAL_TIME_FACET_SCHEMA,
                              nominalStartTime=iso_time(run.previous_barrier
                                                        if run.previous_barrier is not None
                                                        else run.barrier),
                              nominalEndTime=iso_time(run.barrier)),
    }
    if event_type == "FAIL":
        run_facets["errorMessage"] = _facet(naming.producer, ERROR_FACET_SCHEMA,
                                            message=reason or "aborted",
                                            programmingLanguage="unknown")
    ingestion = run.metaservice_job is None

    def identity(table: str) -> DatasetIdentity:
        return dataset_identity(table, locations.get(table), naming)

    inputs = []
    for source in run.inputs:
        ident = identity(source.table)
        inputs.append({"namespace": ident.namespace, "name": ident.name,
                       "facets": _dataset_facets(source.table, ident, source.snapshot_id, naming),
                       "inputFacets": {}})
    outputs = []
    for sink in run.outputs:
        ident = identity(sink.table)
        outputs.append({"namespace": ident.namespace, "name": ident.name,
                        "facets": _dataset_facets(sink.table, ident, sink.snapshot_id, naming),
                        "outputFacets": {}})
    return {
        "eventType": event_type,
        "eventTime": iso_time(event_time_ms),
        "producer": naming.producer,
        "schemaURL": RUN_EVENT_SCHEMA,
        "run": {"runId": run_id(naming.job_namespace, run.job, run.barrier, run.job_run,
                                run.attempt),
                "facets": run_facets},
        "job": {"namespace": naming.job_namespace, "name": run.job, "facets": {
            "jobType": _facet(naming.producer, JOB_TYPE_FACET_SCHEMA, processingType="BATCH",
                              integration="METASERVICE",
                              jobType="INGESTION" if ingestion else "BARRIER")}},
        "inputs": inputs,
        "outputs": outputs,
    }


def barrier_facet_schema(url: str) -> dict[str, Any]:
    """The JSON schema of ``metaservice_barrier``, served at ``url`` (its ``$id``)."""
    table_barrier = {
        "type": "object",
        "properties": {
            "table": {"type": "string", "description": "catalog.database.table"},
            "barrier": {"type": "integer",
                        "description": "the barrier of the snapshot read: snap(s, B) is the "
                                       "snapshot completing the greatest barrier ≤ B"},
            "snapshotId": {"type": "integer", "description": "the Iceberg snapshot read"},
            "previousBarrier": {"type": "integer"},
            "previousSnapshotId": {"type": "integer",
                                   "description": "an incremental step read the changes "
                                                  "after this snapshot"},
        },
        "required": ["table", "barrier", "snapshotId"],
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": url.split("#", 1)[0],
        "$defs": {
            "MetaServiceBarrierRunFacet": {
                "allOf": [
                    {"$ref": BASE_RUN_FACET_SCHEMA},
                    {
                        "type": "object",
                        "description": "The MetaService barrier this run processed: the exact "
                                       "snapshot of every source it read, and of every sink it "
                                       "wrote.",
                        "properties": {
                            "barrier": {"type": "integer",
                                        "description": "milliseconds since the epoch"},
                            "barrierTime": {"type": "string", "format": "date-time"},
                            "job": {"type": "string", "description": "the MetaService job; "
                                    "absent for a root table's ingestion"},
                            "jobRun": {"type": "integer"},
                            "attempt": {"type": "integer", "minimum": 1},
                            "previousBarrier": {"type": "integer"},
                            "inputs": {"type": "array", "items": table_barrier},
                            "outputs": {"type": "array", "items": {
                                "type": "object",
                                "properties": {"table": {"type": "string"},
                                               "snapshotId": {"type": "integer"}},
                                "required": ["table"],
                                "additionalProperties": False}},
                        },
                        "required": ["barrier", "barrierTime", "attempt", "inputs", "outputs"],
                    },
                ],
                "type": "object",
            },
        },
        "type": "object",
        "properties": {BARRIER_FACET: {"$ref": "#/$defs/MetaServiceBarrierRunFacet"}},
    }
