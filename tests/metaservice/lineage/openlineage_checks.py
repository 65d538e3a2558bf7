"""What the OpenLineage tests share: a receiver over HTTP, an environment that configures the
client and is restored after, and two validations of an event.

- :func:`check_with_client_models` rebuilds the event from openlineage-python's own classes
  (generated from the spec's JSON schemas: required fields, field names, enums, the UUID run
  id, the date-times) and requires the client to serialise exactly the event: a field missing,
  renamed or extra, or a schema URL other than the one the client declares, fails.
- :func:`check_with_json_schemas` validates the event and each facet with jsonschema against
  the OpenLineage JSON schema files of the versions the client declares. No package carries
  those files; they are read from ``METASERVICE_TEST_OPENLINEAGE_SPEC_DIR`` (a checkout of
  OpenLineage's ``spec/`` directory at those versions), by default from ``openlineage/spec/``
  in the ``shared/`` folder beside the checkout. The tests that need them skip without them on
  a developer's machine and fail under CI.
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class Receiver:
    """A tiny OpenLineage HTTP endpoint on loopback: it keeps every event POSTed to it, in
    order. While ``failing`` it answers 400 (a status the client does not retry)."""

    def __init__(self, port: int = 0) -> None:
        self.events: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.failing = False
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if receiver.failing:
                    self.send_response(400)
                    self.end_headers()
                    return
                receiver.events.append(json.loads(body))
                receiver.paths.append(self.path)
                self.send_response(201)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- validation against the client's own model classes -----------------------------------------

def _typed(cls: type, data: dict[str, Any], **nested: Any) -> Any:
    fields = {k: v for k, v in data.items() if not k.startswith("_")}
    fields.update(nested)
    facet = cls(**fields, producer=data["_producer"])  # TypeError: a field unknown or missing
    assert data["_schemaURL"] == facet._schemaURL, (data["_schemaURL"], facet._schemaURL)
    return facet


def _dataset_facets(facets: dict[str, Any]) -> dict[str, Any]:
    from openlineage.client.facet_v2 import (
        catalog_dataset,
        dataset_version_dataset,
        symlinks_dataset,
    )

    typed: dict[str, Any] = {}
    for key, data in facets.items():
        if key == "version":
            typed[key] = _typed(dataset_version_dataset.DatasetVersionDatasetFacet, data)
        elif key == "symlinks":
            typed[key] = _typed(symlinks_dataset.SymlinksDatasetFacet, data, identifiers=[
                symlinks_dataset.Identifier(**i) for i in data["identifiers"]])
        elif key == "catalog":
            typed[key] = _typed(catalog_dataset.CatalogDatasetFacet, data)
        else:
            raise AssertionError(f"a dataset facet the specification has not: {key}")
    return typed


def check_with_client_models(event: dict[str, Any], custom_run_facets: set[str]) -> None:
    """``event`` is exactly what openlineage-python's classes make of the same content (see the
    module's docstring); ``custom_run_facets`` are left as they are (checked by their own
    schema)."""
    from openlineage.client.event_v2 import (
        InputDataset,
        Job,
        OutputDataset,
        Run,
        RunEvent,
        RunState,
    )
    from openlineage.client.facet_v2 import (
        error_message_run,
        job_type_job,
        nominal_time_run,
        tags_job,
        tags_run,
    )
    from openlineage.client.serde import Serde

    run_facets: dict[str, Any] = {}
    for key, data in event["run"]["facets"].items():
        if key in custom_run_facets:
            run_facets[key] = data
        elif key == "nominalTime":
            run_facets[key] = _typed(nominal_time_run.NominalTimeRunFacet, data)
        elif key == "errorMessage":
            run_facets[key] = _typed(error_message_run.ErrorMessageRunFacet, data)
        elif key == "tags":  # the client's own (its version)
            run_facets[key] = _typed(tags_run.TagsRunFacet, data, tags=[
                tags_run.TagsRunFacetFields(**t) for t in data["tags"]])
        else:
            raise AssertionError(f"a run facet the specification has not: {key}")
    job_facets: dict[str, Any] = {}
    for key, data in event["job"]["facets"].items():
        if key == "jobType":
            job_facets[key] = _typed(job_type_job.JobTypeJobFacet, data)
        elif key == "tags":
            job_facets[key] = _typed(tags_job.TagsJobFacet, data, tags=[
                tags_job.TagsJobFacetFields(**t) for t in data["tags"]])
        else:
            raise AssertionError(f"a job facet the specification has not: {key}")
    typed = RunEvent(
        eventType=RunState(event["eventType"]), eventTime=event["eventTime"],
        producer=event["producer"],
        run=Run(runId=event["run"]["runId"], facets=run_facets),
        job=Job(namespace=event["job"]["namespace"], name=event["job"]["name"],
                facets=job_facets),
        inputs=[InputDataset(namespace=d["namespace"], name=d["name"],
                             facets=_dataset_facets(d["facets"]), inputFacets=d["inputFacets"])
                for d in event["inputs"]],
        outputs=[OutputDataset(namespace=d["namespace"], name=d["name"],
                               facets=_dataset_facets(d["facets"]),
                               outputFacets=d["outputFacets"])
                 for d in event["outputs"]])
    assert Serde.to_dict(typed) == event


# -- validation against the OpenLineage JSON schemas --------------------------------------------

SHARED_SPEC_DIR = Path(__file__).resolve().parents[3].parent / "shared" / "openlineage" / "spec"


def spec_dir() -> Path | None:
    value = os.environ.get("METASERVICE_TEST_OPENLINEAGE_SPEC_DIR")
    if value:
        return Path(value)
    return SHARED_SPEC_DIR if (SHARED_SPEC_DIR / "OpenLineage.json").is_file() else None


def _registry(extra: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    from referencing import Registry, Resource

    directory = spec_dir()
    assert directory is not None
    resources = []
    for path in [directory / "OpenLineage.json", *sorted((directory / "facets").glob("*.json"))]:
        contents = json.loads(path.read_text())
        resources.append((contents["$id"], Resource.from_contents(contents)))
    for contents in extra:
        resources.append((contents["$id"], Resource.from_contents(contents)))
    return Registry().with_resources(resources)


def check_with_json_schemas(event: dict[str, Any], extra_schemas: list[dict[str, Any]]) -> None:
    """The event against ``OpenLineage.json``'s RunEvent, and every facet against the schema
    its ``_schemaURL`` names (which must be in the spec directory or ``extra_schemas``)."""
    from jsonschema import Draft202012Validator

    registry = _registry(extra_schemas)

    def validate(instance: Any, url: str) -> None:
        registry.resolver().lookup(url)  # the schema is there (else: Unresolvable)
        Draft202012Validator({"$ref": url}, registry=registry,
                             format_checker=Draft202012Validator.FORMAT_CHECKER
                             ).validate(instance)

    assert event["schemaURL"] == "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
    validate(event, event["schemaURL"])
    facets = [*event["run"]["facets"].values(), *event["job"]["facets"].values()]
    for dataset in [*event["inputs"], *event["outputs"]]:
        facets += [*dataset["facets"].values()]
    for facet in facets:
        validate(facet, facet["_schemaURL"])
