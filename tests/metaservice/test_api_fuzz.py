"""schemathesis against /openapi.json on both backends, bounded: no request, valid or not, is
answered with a 5xx, and every status code and response body matches the schema (the
negative cases on PostgreSQL only: what breaks the declared shapes is refused before a store).

Every operation is tried with data its schema allows (positive) and with data that breaks it
(negative); an operation whose path names a namespace, table, job or read session is also
tried aimed at ones that exist, so that its cases get past "not found". In a third of the
cases, one string of the request (path, query or body) carries a NUL or a character outside
the Basic Multilingual Plane. The catalog documents its request bodies as any JSON object
(they are pyiceberg's models): for its positive cases the test describes them as the Iceberg
REST specification does (a subset, below), with locations only in the test's directory or of
schemes no FileIO serves.
"""

from __future__ import annotations

import copy
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from metaservice.app import create_app
from metaservice.db.session import Database
from metaservice.settings import Settings
from tests.metaservice.jobs.test_jobs import plan

# Half a minute of generated requests per backend: the full run's, not the fast subset's.
pytestmark = pytest.mark.slow

EXAMPLES = {GenerationMode.POSITIVE: 12, GenerationMode.NEGATIVE: 8}

EXCLUDED = {
    # The generator sends int64 bounds as JSON floats (9223372036854775807 →
    # 9.223372036854776e18), which are rightly refused; a valid Iceberg body is not a valid
    # table (most are refused, as they should be); and what breaks the test's stricter
    # description of a catalog body (format-version "2😀") breaks no rule of the app's.
    GenerationMode.POSITIVE: [schemathesis.checks.positive_data_acceptance,
                              schemathesis.checks.negative_data_rejection],
    GenerationMode.NEGATIVE: [schemathesis.checks.positive_data_acceptance],
}

# Text with a NUL, and outside the Basic Multilingual Plane.
HOSTILE = ["\u0000", "a\u0000b", "\U0001f600", "x\U0010fffd"]

# Marks, in a path into a JSON document, that the string there is a key.
KEY = object()

# What the aimed cases' path parameters name: what _seed makes.
KNOWN = {"catalog": "lake", "database": "db", "table": "t", "job": "etl", "namespace": "db"}


def test_no_request_is_a_server_error(database: Database, database_url: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    monkeypatch.chdir(tmp_path)  # a relative location, refused, would resolve here
    warehouse = tmp_path / "warehouse"
    app = create_app(Settings(database_url=database_url, warehouse=str(warehouse)),
                     database=database)
    client = TestClient(app)
    _seed(client, warehouse)
    config = client.get("/iceberg/v1/config", params={"warehouse": "lake@strong"})
    known = {**KNOWN, "prefix": config.json()["overrides"]["prefix"]}  # a live read session
    document = app.openapi()
    schemas = {
        GenerationMode.POSITIVE: _with_iceberg_bodies(document, warehouse),
        # Negative cases break what the app itself declares: a body that is no object, a path
        # parameter off its pattern. (Breaking the Iceberg bodies above would let free strings
        # into locations, and so files anywhere.)
        GenerationMode.NEGATIVE: document,
    }
    if backend == "sqlite":
        # What breaks the declared shapes is refused before any store is reached; the cases
        # that get through carry hostile text, which PostgreSQL (NUL) is the stricter store for.
        del schemas[GenerationMode.NEGATIVE]
    statuses: Counter[str] = Counter()
    started = time.monotonic()
    for mode, schema_document in schemas.items():
        schema = schemathesis.openapi.from_dict(schema_document)
        schema.app = app
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 60
        for operation in operations:
            names = {p.name for p in operation.iter_parameters() if p.location == "path"}
            aims = [None] + ([{name: known[name] for name in names}]
                             if mode is GenerationMode.POSITIVE and names <= set(known)
                             and names else [])
            if mode is GenerationMode.NEGATIVE and not _breakable(operation):
                statuses["negative: nothing to break"] += 1
                continue
            for aim in aims:
                _seed(client, warehouse)
                _fuzz(operation, mode, aim, statuses)
    cases = sum(count for key, count in statuses.items() if key.endswith("xx"))
    print(f"\nschemathesis on {backend}: {cases} cases in {time.monotonic() - started:.0f} s, "
          f"{dict(sorted(statuses.items()))}")
    assert not any(key.endswith("5xx") for key in statuses), statuses
    assert statuses["positive 2xx"] > 150 and cases > (1000 if backend == "sqlite" else 1500)


def _fuzz(operation: schemathesis.APIOperation, mode: GenerationMode,
          aim: dict[str, str] | None, statuses: Counter[str]) -> None:
    cases = operation.as_strategy(generation_mode=mode, path_parameters=aim)

    @given(case=cases.flatmap(_with_hostile_text))
    @settings(max_examples=EXAMPLES[mode], deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case: schemathesis.Case) -> None:
        response = case.call_and_validate(excluded_checks=EXCLUDED[mode])
        statuses[f"{mode.value} {response.status_code // 100}xx"] += 1

    check()


def _breakable(operation: schemathesis.APIOperation) -> bool:
    """Whether a request can break the operation's schema: not if it has no body, no query,
    and path parameters any string matches (a path carries only strings)."""
    if operation.get_request_payload_content_types():
        return True
    for parameter in operation.iter_parameters():
        schema = parameter.definition.get("schema", {})
        if (parameter.location != "path" or schema.get("type") != "string"
                or set(schema) - {"type", "title", "description"}):
            return True
    return False


def _with_hostile_text(case: schemathesis.Case) -> st.SearchStrategy[schemathesis.Case]:
    """``case``, or in a third of the draws ``case`` with one of its strings (a path or query
    parameter, a key or value of its JSON body) carrying one of :data:`HOSTILE`."""
    spots = [("path_parameters", key) for key, value in (case.path_parameters or {}).items()
             if isinstance(value, str)]
    spots += [("query", key) for key, value in (case.query or {}).items()
              if isinstance(value, str)]
    spots += [("body", path) for path in _string_paths(case.body)]
    if not spots:
        return st.just(case)

    def spoil(draw: tuple[bool, tuple[str, Any], str, int]) -> schemathesis.Case:
        hostile, (where, key), text, at = draw
        if not hostile:
            return case
        spoiled = case.derive()
        if where == "body":
            spoiled.body = _replaced(case.body, key, lambda s: s[:at] + text + s[at:])
        else:
            values = dict(getattr(case, where))
            # A path parameter is sent as it is, percent-encoded already: text goes at one end.
            encoded = urllib.parse.quote(text) if where == "path_parameters" else text
            values[key] = encoded + values[key] if at % 2 else values[key] + encoded
            setattr(spoiled, where, values)
        return spoiled

    return st.tuples(st.integers(0, 2).map(lambda n: n == 0), st.sampled_from(spots),
                     st.sampled_from(HOSTILE), st.integers(0, 8)).map(spoil)


def _string_paths(document: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Where ``document`` holds a string: a value's path, or a key's (ending in ``KEY``)."""
    if isinstance(document, str):
        return [path]
    if isinstance(document, list):
        return [found for index, item in enumerate(document)
                for found in _string_paths(item, (*path, index))]
    if isinstance(document, dict):
        return [found for key, item in document.items()
                for found in [(*path, key, KEY), *_string_paths(item, (*path, key))]]
    return []


def _replaced(document: Any, path: tuple[Any, ...], change: Any) -> Any:
    """A copy of ``document`` with the string at ``path`` (see :func:`_string_paths`) changed."""
    if not path:
        return change(document)
    if path[-1] is KEY and len(path) == 2:
        return {change(key) if key == path[0] else key: value for key, value in document.items()}
    head, rest = path[0], path[1:]
    if isinstance(document, list):
        return [_replaced(item, rest, change) if index == head else item
                for index, item in enumerate(document)]
    return {key: _replaced(value, rest, change) if key == head else value
            for key, value in document.items()}


def _seed(client: TestClient, warehouse: Path) -> None:
    """What the aimed path parameters name (made again if earlier cases dropped it): namespace
    ``db`` with table ``t`` and a snapshot, root table ``lake.db.t`` with a barrier, job ``etl``
    from it to ``lake.db.out``."""
    client.post("/iceberg/v1/namespaces", json={"namespace": ["db"]})
    tables = "/iceberg/v1/namespaces/db/tables"
    if client.head(f"{tables}/t").status_code == 404:
        created = client.post(tables, json={"name": "t", "schema": _schema()})
        assert created.status_code == 200, created.text
        client.post(f"{tables}/t", json={"requirements": [], "updates": [
            {"action": "add-snapshot", "snapshot": _snapshot(warehouse, 1)},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
             "snapshot-id": 1}]})
    (warehouse / "not-metadata.txt").write_text("hello")
    client.post("/tables/lake/db/t/barriers", json={"snapshot_id": 1})
    plan(client, "etl", ["lake.db.t"], ["lake.db.out"])
    client.post("/jobs/etl/start", json={"from": "latest"})


def _schema() -> dict[str, Any]:
    return {"type": "struct", "schema-id": 0,
            "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


def _snapshot(warehouse: Path, snapshot_id: int) -> dict[str, Any]:
    """A snapshot whose manifest list is never read."""
    return {"snapshot-id": snapshot_id, "sequence-number": snapshot_id,
            "timestamp-ms": 1_700_000_000_000, "schema-id": 0,
            "manifest-list": str(warehouse / "db" / "t" / f"snap-{snapshot_id}.avro"),
            "summary": {"operation": "append"}}


# -- the document, as the fuzzer sees it ----------------------------------------------------


def _with_iceberg_bodies(document: dict[str, Any], warehouse: Path) -> dict[str, Any]:
    document = copy.deepcopy(document)
    bodies = _iceberg_bodies(warehouse)
    for operations in document["paths"].values():
        for operation in operations.values():
            body = bodies.get(operation.get("operationId"))
            if body is not None:
                operation["requestBody"]["content"]["application/json"]["schema"] = body
    return document


def _iceberg_bodies(warehouse: Path) -> dict[str, dict[str, Any]]:
    """The catalog's request bodies as the Iceberg REST specification gives them (a subset),
    with values that reach the catalog's rules: names, ids and refs that exist, locations in
    the test's directory or of schemes no FileIO serves, types nested up to three deep."""
    # (An enum offered beside a free string would be lost: the generator merges the two.)
    text = {"type": "string", "maxLength": 12}
    name = {"enum": ["db", "t", "u", "out", "x.y", "a b", "", *HOSTILE]}
    identifier = _object(namespace={"type": "array", "items": name, "minItems": 1,
                                    "maxItems": 2}, name=name)
    small = {"type": "integer", "minimum": -1, "maximum": 3}
    location = {"enum": [str(warehouse / "db" / "elsewhere"), f"file://{warehouse}/db/f",
                         "foo://bucket/t", "hdfs://namenode/t", "s3://bucket/t", "relative/t",
                         "", str(warehouse / "db" / "/".join(["x" * 200] * 6))]}
    properties = {"type": "object", "maxProperties": 3, "additionalProperties": text,
                  "properties": {"format-version": {"enum": ["1", "2", "3", "9", "0", "x"]},
                                 "write.metadata.path": location}}
    primitive = {"enum": ["boolean", "int", "long", "float", "double", "date", "time",
                          "timestamp", "timestamptz", "string", "uuid", "binary",
                          "decimal(9,2)", "decimal(38,38)", "decimal(99,99)", "fixed[16]",
                          "unknown", "nope"]}
    type_ = primitive
    for _ in range(3):
        field = _object(id={"type": "integer", "minimum": 1, "maximum": 12}, name=name,
                        type=type_, required={"type": "boolean"})
        type_ = {"anyOf": [
            primitive,
            _object(type={"const": "struct"}, fields={"type": "array", "items": field,
                                                      "maxItems": 3}),
            _object(type={"const": "list"}, **{"element-id": small, "element": type_,
                                               "element-required": {"type": "boolean"}}),
            _object(type={"const": "map"}, **{"key-id": small, "key": type_,
                                              "value-id": small, "value": type_,
                                              "value-required": {"type": "boolean"}})]}
    schema = _object(type={"const": "struct"}, **{"schema-id": small},
                     fields={"type": "array", "items": field, "minItems": 1, "maxItems": 3})
    transform = {"enum": ["identity", "bucket[4]", "truncate[3]", "year", "month", "day",
                          "hour", "void", "nope"]}
    spec = _object(**{"spec-id": small}, fields={"type": "array", "maxItems": 2, "items": _object(
        **{"source-id": small, "field-id": {"enum": [1000, 1001]}, "name": name,
           "transform": transform})})
    order = _object(**{"order-id": small}, fields={"type": "array", "maxItems": 2, "items": _object(
        **{"source-id": small, "transform": transform,
           "direction": {"enum": ["asc", "desc"]},
           "null-order": {"enum": ["nulls-first", "nulls-last"]}})})
    snapshot = _object(**{
        "snapshot-id": small, "parent-snapshot-id": small, "sequence-number": small,
        "timestamp-ms": {"type": "integer", "minimum": 1_700_000_000_000,
                         "maximum": 1_700_000_000_100},
        "manifest-list": {"enum": [str(warehouse / "db" / "t" / "snap.avro"), "foo://m"]},
        "schema-id": small,
        "summary": _object(operation={"enum": ["append", "replace", "overwrite", "delete"]},
                           **{"metaservice.job": {"anyOf": [{"enum": ["etl"]}, name]},
                              "metaservice.barrier": {
                                  "enum": ["1", "100", "-1", "x", "9" * 20]}})},
        optional=["parent-snapshot-id", "schema-id"])
    ref = {"enum": ["main", "b"]}
    updates = {"type": "array", "maxItems": 4, "items": {"anyOf": [
        _action("assign-uuid", uuid={"type": "string", "format": "uuid"}),
        _action("upgrade-format-version", **{"format-version": {"enum": [1, 2, 3, 9]}}),
        _action("add-schema", schema=schema),
        _action("set-current-schema", **{"schema-id": small}),
        _action("add-spec", spec=spec),
        _action("set-default-spec", **{"spec-id": small}),
        _action("add-sort-order", **{"sort-order": order}),
        _action("set-default-sort-order", **{"sort-order-id": small}),
        _action("add-snapshot", snapshot=snapshot),
        _action("set-snapshot-ref", **{"ref-name": ref, "type": {"enum": ["branch", "tag"]},
                                       "snapshot-id": small}),
        _action("remove-snapshots", **{"snapshot-ids": {"type": "array", "items": small}}),
        _action("remove-snapshot-ref", **{"ref-name": ref}),
        _action("set-location", location=location),
        _action("set-properties", updates=properties),
        _action("remove-properties", removals={"type": "array", "items": text}),
        _action("remove-schemas", **{"schema-ids": {"type": "array", "items": small}}),
        _action("remove-partition-specs", **{"spec-ids": {"type": "array", "items": small}}),
    ]}}
    requirements = {"type": "array", "maxItems": 2, "items": {"anyOf": [
        _object(type={"const": "assert-create"}),
        _object(type={"const": "assert-ref-snapshot-id"}, ref=ref,
                **{"snapshot-id": {"anyOf": [small, {"type": "null"}]}}),
        _object(type={"const": "assert-current-schema-id"}, **{"current-schema-id": small}),
        _object(type={"const": "assert-default-spec-id"}, **{"default-spec-id": small}),
    ]}}
    commit = _object(requirements=requirements, updates=updates)
    metadata_files = {"enum": [str(warehouse / "not-metadata.txt"), str(warehouse),
                               str(warehouse / "missing.json")]}
    return {
        "iceberg_create_namespace": _object(
            namespace={"type": "array", "items": name, "minItems": 1, "maxItems": 2},
            properties=properties, optional=["properties"]),
        "iceberg_update_namespace_properties": _object(
            removals={"type": "array", "items": text, "maxItems": 2}, updates=properties),
        "iceberg_create_table": _object(
            name=name, schema=schema, location=location, properties=properties,
            optional=["location", "partition-spec", "write-order", "stage-create",
                      "properties"],
            **{"partition-spec": spec, "write-order": order,
               "stage-create": {"type": "boolean"}}),
        "iceberg_register_table": _object(
            name=name, overwrite={"type": "boolean"}, optional=["overwrite"],
            **{"metadata-location": metadata_files}),
        "iceberg_commit_table": commit,
        "iceberg_commit_transaction": _object(**{"table-changes": {
            "type": "array", "minItems": 1, "maxItems": 2,
            "items": _object(identifier=identifier, requirements=requirements,
                             updates=updates)}}),
        "iceberg_rename_table": _object(source=identifier, destination=identifier),
    }


def _object(*, optional: list[str] | None = None, **properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False,
            "required": [key for key in properties if key not in (optional or [])]}


def _action(action: str, **fields: Any) -> dict[str, Any]:
    return _object(action={"const": action}, **fields)


def test_the_fuzzer_sees_valid_documents(tmp_path: Path) -> None:
    """The descriptions above are JSON Schema the fuzzer can use (a typo there would only
    narrow what it tries): each replaces the body of an operation the app serves, is valid
    JSON Schema using only the keywords JSON Schema 2020-12 defines (an unknown one, such as
    ``maxItem``, is silently ignored by the fuzzer and by the metaschema alike), requires only
    properties it describes, and the bodies the fuzzer draws from the document match it."""
    from jsonschema import Draft202012Validator

    bodies = _iceberg_bodies(tmp_path)
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'unused.db'}",
                              warehouse=str(tmp_path / "warehouse")))
    served = {operation["operationId"]: operation for operations in app.openapi()["paths"].values()
              for operation in operations.values()}
    document = _with_iceberg_bodies(app.openapi(), tmp_path)
    operations = {operation.definition.raw["operationId"]: operation
                  for operation in (result.ok() for result in
                                    schemathesis.openapi.from_dict(document).get_all_operations())}
    for operation_id, body in bodies.items():
        assert "application/json" in served.get(operation_id, {}).get(
            "requestBody", {}).get("content", {}), f"{operation_id}: no such operation with a body"
        Draft202012Validator.check_schema(body)
        for where, schema in _subschemas(body, (operation_id,)):
            unknown = set(schema) - SCHEMA_KEYWORDS
            assert not unknown, f"{'/'.join(where)}: not JSON Schema keywords: {unknown}"
            missing = set(schema.get("required", [])) - set(schema.get("properties", {}))
            assert not missing, f"{'/'.join(where)}: required but not described: {missing}"
        _drawn_bodies_match(operations[operation_id], Draft202012Validator(body))


def _drawn_bodies_match(operation: schemathesis.APIOperation, description: Any) -> None:
    """A few bodies the fuzzer draws for ``operation`` all match ``description``."""

    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
    @settings(max_examples=5, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case: schemathesis.Case) -> None:
        errors = [error.message for error in description.iter_errors(case.body)]
        assert errors == [], (operation.label, case.body, errors)

    check()


def _schema_keywords() -> frozenset[str]:
    """Every keyword of JSON Schema 2020-12: the properties of its vocabularies' metaschemas."""
    from jsonschema_specifications import REGISTRY

    vocabularies = "https://json-schema.org/draft/2020-12/meta/"
    return frozenset(keyword for uri in REGISTRY if uri.startswith(vocabularies)
                     for keyword in REGISTRY[uri].contents.get("properties", {}))


SCHEMA_KEYWORDS = _schema_keywords()


def _subschemas(schema: dict[str, Any], where: tuple[str, ...],
                ) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """``schema`` and every schema inside it, each with the path to it."""
    found = [(where, schema)]
    for keyword, value in schema.items():
        if keyword in ("properties", "patternProperties", "$defs", "dependentSchemas"):
            found += [item for name, sub in value.items()
                      for item in _subschemas(sub, (*where, keyword, name))]
        elif keyword in ("anyOf", "allOf", "oneOf", "prefixItems"):
            found += [item for index, sub in enumerate(value)
                      for item in _subschemas(sub, (*where, keyword, str(index)))]
        elif isinstance(value, dict) and keyword in (
                "items", "additionalProperties", "not", "if", "then", "else", "contains",
                "propertyNames", "unevaluatedItems", "unevaluatedProperties"):
            found += _subschemas(value, (*where, keyword))
    return found
