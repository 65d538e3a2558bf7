"""What a create or a commit makes of an Iceberg view's metadata (``catalog/views/rules.py``),
checked against what Iceberg's Java ``ViewMetadata.Builder`` does with the same changes."""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import ViewMetadata, ViewVersion

from metaservice.catalog.views import rules as sql_views
from metaservice.catalog.views.rules import CommitViewRequest, RequirementFailed, ViewRuleError

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), schema_id=7)
WIDER = Schema(NestedField(1, "id", LongType(), required=False),
               NestedField(2, "name", StringType(), required=False))


def version(sql: str, *, dialects: tuple[str, ...] = ("spark",), schema_id: int = 0,
            version_id: int = 1, timestamp_ms: int = 1_000) -> ViewVersion:
    return ViewVersion.model_validate({
        "version-id": version_id, "schema-id": schema_id, "timestamp-ms": timestamp_ms,
        "summary": {"engine-name": "spark"}, "default-namespace": ["db"],
        "representations": [{"type": "sql", "sql": sql, "dialect": d} for d in dialects]})


def created(**properties: str) -> ViewMetadata:
    return sql_views.new_view(SCHEMA, version("SELECT 1", version_id=9, schema_id=3),
                              "/w/db/v", properties, now_ms=5_000)


def commit(base: ViewMetadata, updates: list[dict[str, Any]],
           requirements: list[dict[str, Any]] | None = None,
           now_ms: int = 9_000) -> ViewMetadata | None:
    request = CommitViewRequest.model_validate({"requirements": requirements or [],
                                                "updates": updates})
    return sql_views.commit(base, request.requirements, list(request.updates), now_ms)


def replace(sql: str, schema: Schema | None = None, **kw: Any) -> list[dict[str, Any]]:
    """The updates Java's client sends for ``CREATE OR REPLACE VIEW``."""
    updates: list[dict[str, Any]] = []
    if schema is not None:
        updates.append({"action": "add-schema", "schema": schema.model_dump()})
    updates.append({"action": "add-view-version", "view-version": version(
        sql, schema_id=-1 if schema is not None else 0, version_id=2, **kw).model_dump()})
    updates.append({"action": "set-current-view-version", "view-version-id": -1})
    return updates


def test_a_new_view_has_version_1_of_schema_0_and_one_log_entry() -> None:
    view = created(comment="c")
    assert (view.current_version_id, [v.version_id for v in view.versions]) == (1, [1])
    assert [s.schema_id for s in view.schemas] == [0] and view.versions[0].schema_id == 0
    assert [(e.version_id, e.timestamp_ms) for e in view.version_log] == [(1, 1_000)]
    assert view.properties == {"comment": "c"} and view.location == "/w/db/v"
    assert view.format_version == 1 and len(view.view_uuid) == 36
    assert created().view_uuid != view.view_uuid


def test_a_replace_adds_a_version_and_a_schema_and_makes_it_current() -> None:
    base = created()
    after = commit(base, replace("SELECT 2", WIDER, timestamp_ms=8_000),
                   [{"type": "assert-view-uuid", "uuid": base.view_uuid.upper()}])
    assert after is not None and after.view_uuid == base.view_uuid
    assert after.current_version_id == 2
    assert [(v.version_id, v.schema_id) for v in after.versions] == [(1, 0), (2, 1)]
    assert [s.schema_id for s in after.schemas] == [0, 1]
    # The log entry of a version the commit added carries the version's own timestamp.
    assert [(e.version_id, e.timestamp_ms) for e in after.version_log] == [(1, 1_000),
                                                                          (2, 8_000)]


def test_a_known_schema_and_a_known_version_are_reused() -> None:
    base = created()
    # The same schema under another id is schema 0; the same definition is version 1.
    assert commit(base, [{"action": "add-schema", "schema": SCHEMA.model_dump()}]) is None
    same = version("SELECT 1", version_id=5, timestamp_ms=7_777).model_dump()
    assert commit(base, [{"action": "add-view-version", "view-version": same}]) is None
    two = commit(base, replace("SELECT 2"))
    assert two is not None
    # Back to version 1: it is reused, and its log entry is stamped by the server's clock.
    back = commit(two, [{"action": "set-current-view-version", "view-version-id": 1}],
                  now_ms=12_345)
    assert back is not None and [v.version_id for v in back.versions] == [1, 2]
    assert [(e.version_id, e.timestamp_ms) for e in back.version_log][-1] == (1, 12_345)


def test_a_failed_requirement_is_a_lost_race_and_nothing_else_is() -> None:
    base = created()
    other = created().view_uuid
    with pytest.raises(RequirementFailed, match="uuid does not match"):
        commit(base, replace("SELECT 2"), [{"type": "assert-view-uuid", "uuid": other}])
    cases: list[tuple[list[dict[str, Any]], str]] = [
        ([{"action": "set-current-view-version", "view-version-id": -1}], "no version was added"),
        ([{"action": "set-current-view-version", "view-version-id": 42}], "unknown version 42"),
        ([{"action": "add-view-version", "view-version": version("x", schema_id=-1)
           .model_dump()}], "no schema was added"),
        ([{"action": "add-view-version", "view-version": version("x", schema_id=4)
           .model_dump()}], "unknown schema 4"),
        ([{"action": "add-view-version", "view-version": version(
            "x", dialects=("spark", "SPARK")).model_dump()}], "one SQL representation per"),
        ([{"action": "assign-uuid", "uuid": other}], "never reassigned"),
        ([{"action": "upgrade-format-version", "format-version": 2}], "not supported"),
        ([{"action": "set-properties", "updates": {"version.history.num-entries": "0"}}],
         "must be positive"),
        ([{"action": "set-properties", "updates": {"version.history.num-entries": "x"}}],
         "must be an integer"),
    ]
    for updates, message in cases:
        with pytest.raises(ViewRuleError, match=message):
            commit(base, updates)
    with pytest.raises(ValueError, match="assert-view-uuid"):
        commit(base, replace("SELECT 2"), [{"type": "assert-view-uuid", "uuid": "nope"}])


def test_a_replace_keeps_every_dialect_unless_the_view_allows_dropping_one() -> None:
    both = commit(created(), replace("SELECT 2", dialects=("spark", "trino")))
    assert both is not None
    with pytest.raises(ViewRuleError, match=r"drops dialect\(s\) \['trino'\]"):
        commit(both, replace("SELECT 3"))
    allowed = commit(both, [{"action": "set-properties",
                             "updates": {"replace.drop-dialect.allowed": "true"}},
                            *replace("SELECT 3")])
    assert allowed is not None and allowed.current_version_id == 3


def test_only_the_newest_versions_are_kept_and_the_log_follows() -> None:
    view = created(**{"version.history.num-entries": "2"})
    for number in range(2, 5):
        after = commit(view, replace(f"SELECT {number}", timestamp_ms=number * 1_000))
        assert after is not None
        view = after
    assert [v.version_id for v in view.versions] == [3, 4] and view.current_version_id == 4
    assert [e.version_id for e in view.version_log] == [3, 4]
    # Back to 3, then one more: the current one stays, with the newest.
    back = commit(view, [{"action": "set-current-view-version", "view-version-id": 3}])
    assert back is not None
    last = commit(back, replace("SELECT 5"))
    assert last is not None and [v.version_id for v in last.versions] == [4, 5]
    assert [e.version_id for e in last.version_log] == [5]


def test_properties_and_location_are_changes_and_a_no_op_is_none() -> None:
    base = created(a="1", b="2")
    after = commit(base, [{"action": "set-properties", "updates": {"c": "3"}},
                          {"action": "remove-properties", "removals": ["a", "zz"]},
                          {"action": "set-location", "location": "/w/elsewhere"}])
    assert after is not None
    assert after.properties == {"b": "2", "c": "3"} and after.location == "/w/elsewhere"
    assert after.versions == base.versions and after.version_log == base.version_log
    assert commit(base, [{"action": "set-location", "location": "/w/db/v"},
                         {"action": "assign-uuid", "uuid": base.view_uuid},
                         {"action": "upgrade-format-version", "format-version": 1}]) is None


def test_a_table_update_is_no_view_update() -> None:
    with pytest.raises(ValueError, match="add-spec|does not match"):
        CommitViewRequest.model_validate({"updates": [{"action": "add-spec", "spec": {}}]})


def test_a_registered_file_must_be_whole() -> None:
    view = created()
    assert sql_views.check(view.model_copy(update={"view_uuid": view.view_uuid.upper()})
                           ).view_uuid == view.view_uuid
    cases: list[tuple[dict[str, Any], str]] = [
        ({"view_uuid": "x"}, "not a UUID"),
        ({"current_version_id": 3}, "current version 3"),
        ({"schemas": []}, "unknown schema 0"),
        ({"properties": {"version.history.num-entries": "-1"}}, "must be positive"),
    ]
    for broken, message in cases:
        with pytest.raises(ViewRuleError, match=message):
            sql_views.check(view.model_copy(update=broken))


def test_metadata_files_are_numbered_in_the_metadata_directory() -> None:
    view = created()
    first = sql_views.metadata_file_location(view, None)
    assert first.startswith("/w/db/v/metadata/00001-") and first.endswith(".metadata.json")
    second = sql_views.metadata_file_location(view, first)
    assert second.startswith("/w/db/v/metadata/00002-") and second != first
    elsewhere = view.model_copy(update={"properties": {"write.metadata.path": "/w/m/"}})
    assert sql_views.metadata_file_location(elsewhere, "/x/odd.json").startswith("/w/m/00001-")
