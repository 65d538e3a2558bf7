"""Iceberg views (the SQL objects of the Iceberg view specification), the pure part: the
requests pyiceberg 0.12 has no model for, and what a create or a commit makes of a view's
metadata.

pyiceberg 0.12 models the view metadata (``pyiceberg.view.metadata``) and the create and
register requests (``pyiceberg.catalog.rest``), and the updates a view shares with tables
(``assign-uuid``, ``upgrade-format-version``, ``add-schema``, ``set-location``,
``set-properties``, ``remove-properties``); it has no ``add-view-version``,
``set-current-view-version`` or ``assert-view-uuid``, and applies no update to a view. Those are
here, applied as Iceberg's Java ``ViewMetadata.Builder`` does, so that a client computing the
same changes locally gets the same metadata back:

- a schema equal to a known one (ignoring its id) reuses that one's id, else takes the highest
  id plus one; a version equal to a known one (ignoring id and timestamp) reuses it, else takes
  the highest id plus one; ``-1`` names the schema or version added last by the same commit;
- the version log gets an entry when the current version changes, stamped with the version's
  own timestamp if the commit added it, else with the server's clock;
- a version holds at most one SQL representation per dialect, and a replacement keeps every
  dialect of the version it replaces unless ``replace.drop-dialect.allowed`` is ``true``;
- at most ``version.history.num-entries`` (default 10) versions are kept: the newest by id, the
  current one and those the commit added; the version log forgets what precedes an entry whose
  version is gone.

Every rule a request breaks is a :class:`ViewRuleError` (a 400); a requirement that no longer
holds is a :class:`RequirementFailed` (the one 409 a client retries).
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Literal

from pydantic import Field
from pyiceberg.schema import Schema
from pyiceberg.table import TableIdentifier
from pyiceberg.table.update import (
    AddSchemaUpdate,
    AssignUUIDUpdate,
    RemovePropertiesUpdate,
    SetLocationUpdate,
    SetPropertiesUpdate,
    UpgradeFormatVersionUpdate,
)
from pyiceberg.typedef import IcebergBaseModel
from pyiceberg.view.metadata import ViewHistoryEntry, ViewMetadata, ViewVersion

FORMAT_VERSION = 1
LAST_ADDED = -1
HISTORY_SIZE = "version.history.num-entries"
HISTORY_SIZE_DEFAULT = 10
DROP_DIALECT_ALLOWED = "replace.drop-dialect.allowed"
METADATA_PATH = "write.metadata.path"
# View properties naming where the view's files go: each must lie inside the warehouse.
LOCATION_PROPERTIES = (METADATA_PATH,)


class ViewRuleError(ValueError):
    """A request or a metadata file that breaks the view specification: a 400."""


class RequirementFailed(Exception):
    """A requirement of a commit that no longer holds: the client refreshes and retries."""


class AddViewVersionUpdate(IcebergBaseModel):
    action: Literal["add-view-version"] = Field(default="add-view-version")
    view_version: ViewVersion = Field(alias="view-version")


class SetCurrentViewVersionUpdate(IcebergBaseModel):
    action: Literal["set-current-view-version"] = Field(default="set-current-view-version")
    view_version_id: int = Field(alias="view-version-id")


class AssertViewUUID(IcebergBaseModel):
    type: Literal["assert-view-uuid"] = Field(default="assert-view-uuid")
    uuid: str


ViewUpdate = Annotated[
    AssignUUIDUpdate | UpgradeFormatVersionUpdate | AddSchemaUpdate | SetLocationUpdate
    | SetPropertiesUpdate | RemovePropertiesUpdate | AddViewVersionUpdate
    | SetCurrentViewVersionUpdate,
    Field(discriminator="action")]


class CommitViewRequest(IcebergBaseModel):
    identifier: TableIdentifier | None = Field(default=None)
    requirements: list[AssertViewUUID] = Field(default_factory=list)
    updates: list[ViewUpdate] = Field(default_factory=list)


def _uuid(value: str, what: str) -> str:
    """A UUID in its canonical form (lower case, dashes)."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        raise ViewRuleError(f"{what} {str(value)[:80]!r} is not a UUID") from None


def _dialects(version: ViewVersion) -> list[str]:
    return [r.root.dialect.lower() for r in version.representations]


def _same_version(one: ViewVersion, two: ViewVersion) -> bool:
    """Whether two versions define the same view (their ids and timestamps aside)."""
    return (one.summary == two.summary and one.representations == two.representations
            and one.default_catalog == two.default_catalog
            and tuple(one.default_namespace) == tuple(two.default_namespace)
            and one.schema_id == two.schema_id)


class _Builder:
    """Java's ``ViewMetadata.Builder``, reduced to what a catalog applies."""

    def __init__(self, base: ViewMetadata | None, now_ms: int) -> None:
        self.base = base
        self.now_ms = now_ms
        self.uuid = base.view_uuid if base is not None else None
        self.location = base.location if base is not None else None
        self.schemas = list(base.schemas) if base is not None else []
        self.versions = list(base.versions) if base is not None else []
        self.history = list(base.version_log) if base is not None else []
        self.properties = dict(base.properties) if base is not None else {}
        self.current: int | None = base.current_version_id if base is not None else None
        self.added: set[int] = set()
        self.last_added_version: int | None = None
        self.last_added_schema: int | None = None
        self.history_entry: ViewHistoryEntry | None = None
        self.changed = False

    def apply(self, update: object) -> None:
        if isinstance(update, AssignUUIDUpdate):
            value = _uuid(str(update.uuid), "view-uuid")
            if self.uuid is not None and value != _uuid(self.uuid, "view-uuid"):
                raise ViewRuleError("a view's uuid is never reassigned")
            if self.uuid is None:
                self.uuid, self.changed = value, True
        elif isinstance(update, UpgradeFormatVersionUpdate):
            if update.format_version != FORMAT_VERSION:
                raise ViewRuleError(f"view format version {update.format_version} is not "
                                    f"supported (only {FORMAT_VERSION})")
        elif isinstance(update, AddSchemaUpdate):
            self.add_schema(update.schema_)
        elif isinstance(update, SetLocationUpdate):
            if update.location != self.location:
                self.location, self.changed = update.location, True
        elif isinstance(update, SetPropertiesUpdate):
            if update.updates:
                self.properties.update(update.updates)
                self.changed = True
        elif isinstance(update, RemovePropertiesUpdate):
            if update.removals:
                for key in update.removals:
                    self.properties.pop(key, None)
                self.changed = True
        elif isinstance(update, AddViewVersionUpdate):
            self.add_version(update.view_version)
        elif isinstance(update, SetCurrentViewVersionUpdate):
            self.set_current(update.view_version_id)
        else:  # pragma: no cover - the request's model admits no other update
            raise ViewRuleError(f"update {type(update).__name__} does not apply to a view")

    def add_schema(self, schema: Schema) -> int:
        new_id = 0
        for known in self.schemas:
            if known == schema:  # pyiceberg compares fields and identifier fields, not ids
                return known.schema_id
            new_id = max(new_id, known.schema_id + 1)
        self.schemas.append(schema.model_copy(update={"schema_id": new_id}))
        self.last_added_schema, self.changed = new_id, True
        return new_id

    def add_version(self, version: ViewVersion) -> int:
        schema_id = version.schema_id
        if schema_id == LAST_ADDED:
            if self.last_added_schema is None:
                raise ViewRuleError("view version with schema-id -1, but no schema was added")
            schema_id = self.last_added_schema
        if schema_id not in {s.schema_id for s in self.schemas}:
            raise ViewRuleError(f"view version names unknown schema {schema_id}")
        if not version.representations:
            raise ViewRuleError("a view version has at least one representation")
        dialects = _dialects(version)
        if len(set(dialects)) != len(dialects):
            raise ViewRuleError("a view version has at most one SQL representation per dialect, "
                                f"not {sorted(dialects)}")
        version = version.model_copy(update={"schema_id": schema_id})
        new_id = version.version_id
        for known in self.versions:
            if _same_version(known, version):
                self.last_added_version = (known.version_id if known.version_id in self.added
                                           else None)
                return known.version_id
            new_id = max(new_id, known.version_id + 1)
        self.versions.append(version.model_copy(update={"version_id": new_id}))
        self.added.add(new_id)
        self.last_added_version, self.changed = new_id, True
        return new_id

    def set_current(self, version_id: int) -> None:
        if version_id == LAST_ADDED:
            if self.last_added_version is None:
                raise ViewRuleError("set-current-view-version -1, but no version was added")
            version_id = self.last_added_version
        if version_id == self.current:
            return
        version = next((v for v in self.versions if v.version_id == version_id), None)
        if version is None:
            raise ViewRuleError(f"cannot set the current version to unknown version {version_id}")
        self.current, self.changed = version_id, True
        stamp = version.timestamp_ms if version_id in self.added else self.now_ms
        self.history_entry = ViewHistoryEntry.model_validate({"timestamp-ms": stamp,
                                                             "version-id": version_id})

    def build(self) -> ViewMetadata:
        if not self.location:
            raise ViewRuleError("a view has a location")
        if not self.versions or self.current is None:
            raise ViewRuleError("a view has a current version")
        history = [*self.history, *([self.history_entry] if self.history_entry else [])]
        by_id = {v.version_id: v for v in self.versions}
        if self.base is not None and self.properties.get(DROP_DIALECT_ALLOWED,
                                                         "false").lower() != "true":
            before = set(_dialects(_current(self.base)))
            after = set(_dialects(by_id[self.current]))
            if not before <= after:
                raise ViewRuleError(
                    f"the new version drops dialect(s) {sorted(before - after)} of the current "
                    f"one (set the view property {DROP_DIALECT_ALLOWED}=true to allow it)")
        keep = max(len(self.added | {self.current}), history_size(self.properties))
        versions = self.versions
        if len(versions) > keep:
            newest = sorted((i for i in by_id if i != self.current), reverse=True)
            kept = {self.current, *newest[:keep - 1]}
            versions = [v for v in versions if v.version_id in kept]
            retained: list[ViewHistoryEntry] = []
            for entry in history:
                if entry.version_id in kept:
                    retained.append(entry)
                else:
                    retained.clear()  # nothing before a version that is gone
            history = retained
        return ViewMetadata.model_validate({
            "view-uuid": self.uuid if self.uuid is not None else str(uuid.uuid4()),
            "format-version": FORMAT_VERSION, "location": self.location,
            "schemas": self.schemas, "current-version-id": self.current, "versions": versions,
            "version-log": history, "properties": self.properties})


def _current(metadata: ViewMetadata) -> ViewVersion:
    for version in metadata.versions:
        if version.version_id == metadata.current_version_id:
            return version
    raise ViewRuleError(f"the view's current version {metadata.current_version_id} is not "
                        "among its versions")


def history_size(properties: dict[str, str]) -> int:
    raw = properties.get(HISTORY_SIZE, str(HISTORY_SIZE_DEFAULT))
    try:
        size = int(raw)
    except ValueError:
        raise ViewRuleError(f"{HISTORY_SIZE} must be an integer, not {raw[:40]!r}") from None
    if size <= 0:
        raise ViewRuleError(f"{HISTORY_SIZE} must be positive, not {size}")
    return size


def new_view(schema: Schema, version: ViewVersion, location: str,
             properties: dict[str, str], now_ms: int) -> ViewMetadata:
    """A new view's metadata: ``version`` (as version 1) of ``schema`` (as schema 0) is current;
    a fresh view-uuid."""
    builder = _Builder(None, now_ms)
    builder.properties.update(properties)
    builder.location = location
    schema_id = builder.add_schema(schema)
    builder.set_current(builder.add_version(
        version.model_copy(update={"version_id": 1, "schema_id": schema_id})))
    return builder.build()


def commit(base: ViewMetadata, requirements: list[AssertViewUUID], updates: list[object],
           now_ms: int) -> ViewMetadata | None:
    """``base`` with ``updates`` applied, once every requirement holds; None when the updates
    change nothing.

    Raises:
        RequirementFailed: a requirement does not hold (any more).
        ViewRuleError: an update breaks the view specification.
    """
    for requirement in requirements:
        if _uuid(requirement.uuid, "assert-view-uuid") != _uuid(base.view_uuid, "view-uuid"):
            raise RequirementFailed(
                f"view uuid does not match: {requirement.uuid} != {base.view_uuid}")
    builder = _Builder(base, now_ms)
    for update in updates:
        builder.apply(update)
    if not builder.changed:
        return None
    return builder.build()


def check(metadata: ViewMetadata) -> ViewMetadata:
    """A view's metadata read from a file (``register``), once it is whole: a UUID, a current
    version among its versions, the schema of every version among its schemas, and one SQL
    representation per dialect. Answers it with its uuid in canonical form."""
    view_uuid = _uuid(metadata.view_uuid, "view-uuid")
    current = _current(metadata)
    schema_ids = {s.schema_id for s in metadata.schemas}
    for version in metadata.versions:
        if version.schema_id not in schema_ids:
            raise ViewRuleError(f"view version {version.version_id} names unknown schema "
                                f"{version.schema_id}")
        dialects = _dialects(version)
        if len(set(dialects)) != len(dialects):
            raise ViewRuleError(f"view version {version.version_id} has two representations "
                                "of one dialect")
    if not current.representations:
        raise ViewRuleError("the view's current version has no representation")
    history_size(metadata.properties)
    return metadata.model_copy(update={"view_uuid": view_uuid})


_VERSION_PREFIX = re.compile(r"^(\d+)-")


def metadata_file_location(metadata: ViewMetadata, previous: str | None) -> str:
    """Where the view's next metadata file goes: in ``write.metadata.path``, or the view
    location's ``metadata`` directory, numbered after ``previous`` (the current file)."""
    number = 1
    if previous is not None:
        match = _VERSION_PREFIX.match(previous.rsplit("/", 1)[-1])
        number = int(match.group(1)) + 1 if match else 1
    directory = metadata.properties.get(METADATA_PATH) or f"{metadata.location}/metadata"
    return f"{directory.rstrip('/')}/{number:05d}-{uuid.uuid4()}.metadata.json"
