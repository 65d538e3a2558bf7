"""The catalog's request bodies, typed as the Iceberg REST catalog OpenAPI specification gives
them (``open-api/rest-catalog-open-api.yaml``): ``CreateNamespaceRequest``,
``UpdateNamespacePropertiesRequest``, ``CreateTableRequest``, ``RegisterTableRequest``,
``RenameTableRequest``, ``CommitTableRequest``, ``CommitTransactionRequest``,
``CreateViewRequest``, ``RegisterViewRequest``, ``CommitViewRequest``,
``ReportMetricsRequest``, ``PlanTableScanRequest`` and ``FetchScanTasksRequest``.

The Iceberg parts of a body (schemas, partition specs, sort orders, a commit's requirements and
updates, a view's version) are pyiceberg's own models; the document describes each as a JSON
object that the Iceberg specification defines, since what pyiceberg accepts there is more than
a JSON schema says. A body that breaks any of these is a 400 ``BadRequestException``: a
pydantic validation error is rendered so by the catalog's error renderer, and what pyiceberg's
parsers raise besides (a ``TypeError``, a type nested too deep for its recursion) is turned into
:class:`~metaservice.catalog.errors.BadRequestError` here, while the body is read.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    model_validator,
)
from pyiceberg.expressions import BooleanExpression, SerializableBooleanExpression
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableRequest as PyIcebergCommitTableRequest
from pyiceberg.table import TableIdentifier as PyIcebergTableIdentifier
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.view import ViewVersion

from metaservice.catalog.errors import BadRequestError
from metaservice.catalog.tables import validation
from metaservice.catalog.views.rules import AssertViewUUID, ViewUpdate
from metaservice.names import namespace_levels

StrictBool = Annotated[bool, Strict()]


def _iceberg_object(what: str) -> WithJsonSchema:
    """How the document describes an Iceberg part of a body that pyiceberg's model parses."""
    return WithJsonSchema({"type": "object", "description": f"{what} (Iceberg REST "
                                                           "specification)"})


IcebergSchema = Annotated[Schema, _iceberg_object("a Schema")]
IcebergPartitionSpec = Annotated[PartitionSpec, _iceberg_object("a PartitionSpec")]
IcebergSortOrder = Annotated[SortOrder, _iceberg_object("a SortOrder")]
IcebergRequirement = Annotated[TableRequirement, _iceberg_object(
    "a TableRequirement, by its type: assert-create, assert-table-uuid, "
    "assert-ref-snapshot-id, assert-last-assigned-field-id, assert-current-schema-id, "
    "assert-last-assigned-partition-id, assert-default-spec-id, assert-default-sort-order-id")]
IcebergUpdate = Annotated[TableUpdate, _iceberg_object(
    "a TableUpdate, by its action: assign-uuid, upgrade-format-version, add-schema, "
    "set-current-schema, add-spec, set-default-spec, add-sort-order, set-default-sort-order, "
    "add-snapshot, set-snapshot-ref, remove-snapshots, remove-snapshot-ref, set-location, "
    "set-properties, remove-properties, remove-schemas, remove-partition-specs, "
    "set-statistics, remove-statistics, ...")]
IcebergViewVersion = Annotated[ViewVersion, _iceberg_object("a ViewVersion")]
IcebergViewRequirement = Annotated[AssertViewUUID, _iceberg_object(
    "a ViewRequirement (assert-view-uuid)")]
IcebergViewUpdate = Annotated[ViewUpdate, _iceberg_object(
    "a ViewUpdate, by its action: assign-uuid, upgrade-format-version, add-schema, "
    "set-location, set-properties, remove-properties, add-view-version, "
    "set-current-view-version")]

Namespace = Annotated[list[str], Field(description="the namespace's levels, one or more")]
Properties = dict[str, str]


_UNPARSEABLE: tuple[type[Exception], ...] = (
    *validation.INVALID_METADATA, RecursionError, AttributeError, IndexError)
"""What pyiceberg's parsers raise, besides pydantic's validation errors, on a body they cannot
read."""


class IcebergRequest(BaseModel):
    """A request body of the catalog. Fields it does not know are ignored, as Iceberg's own
    servers ignore them."""

    model_config = ConfigDict(populate_by_name=True)

    refused_as: ClassVar[str] = "invalid request"
    """How a refusal's message starts."""

    @model_validator(mode="wrap")
    @classmethod
    def _refuse_what_pyiceberg_cannot_parse(cls, data: Any,
                                            handler: ValidatorFunctionWrapHandler) -> Any:
        cls._check_before_parsing(data)
        try:
            return handler(data)
        except ValidationError:
            raise
        except _UNPARSEABLE as exc:
            raise BadRequestError(f"{cls.refused_as}: {validation.describe(exc)}") from exc

    @classmethod
    def _check_before_parsing(cls, data: Any) -> None:
        """What the raw body must satisfy before pyiceberg's parsers recurse into it."""


class CreateNamespaceRequest(IcebergRequest):
    namespace: Namespace
    properties: Properties | None = Field(default=None, description="none: no properties")


class UpdateNamespacePropertiesRequest(IcebergRequest):
    removals: list[str] | None = None
    updates: Properties | None = None


class TableIdentifier(IcebergRequest):
    namespace: Namespace
    name: str


class RenameTableRequest(IcebergRequest):
    """A table's or a view's new name (``RenameTableRequest``; views are renamed with the same
    body)."""

    source: TableIdentifier
    destination: TableIdentifier


class CreateTableRequest(IcebergRequest):
    refused_as: ClassVar[str] = "invalid table"

    name: str
    location: str | None = None
    table_schema: IcebergSchema = Field(alias="schema")
    partition_spec: IcebergPartitionSpec | None = Field(default=None, alias="partition-spec")
    write_order: IcebergSortOrder | None = Field(default=None, alias="write-order")
    stage_create: StrictBool = Field(default=False, alias="stage-create")
    properties: Properties = Field(default_factory=dict)

    @classmethod
    def _check_before_parsing(cls, data: Any) -> None:
        if isinstance(data, dict):
            validation.check_schema_depth(data.get("schema"))


class RegisterTableRequest(IcebergRequest):
    name: str
    metadata_location: str = Field(alias="metadata-location")
    overwrite: StrictBool = False


class CommitTableRequest(IcebergRequest):
    """A commit to one table: the requirements that must hold and the updates to apply. The
    identifier may be left out where the path names the table."""

    refused_as: ClassVar[str] = "invalid commit"

    identifier: TableIdentifier | None = None
    requirements: list[IcebergRequirement] = Field(default_factory=list)
    updates: list[IcebergUpdate] = Field(default_factory=list)

    @classmethod
    def _check_before_parsing(cls, data: Any) -> None:
        updates = data.get("updates") if isinstance(data, dict) else None
        for update in updates if isinstance(updates, list) else []:
            if isinstance(update, dict) and update.get("action") == "add-schema":
                validation.check_schema_depth(update.get("schema"))

    def for_table(self, namespace: str, table: str) -> PyIcebergCommitTableRequest:
        """pyiceberg's request for this commit to ``table`` of ``namespace`` (its stored form,
        levels joined by ``\x1f``)."""
        return PyIcebergCommitTableRequest(
            identifier=PyIcebergTableIdentifier.model_validate(
                {"namespace": list(namespace_levels(namespace)), "name": table}),
            requirements=tuple(self.requirements), updates=tuple(self.updates))


class TableChange(CommitTableRequest):
    """One table's commit in a transaction: it names its table."""

    identifier: TableIdentifier  # type: ignore[assignment]


class CommitTransactionRequest(IcebergRequest):
    table_changes: list[TableChange] = Field(alias="table-changes", min_length=1)


class CreateViewRequest(IcebergRequest):
    refused_as: ClassVar[str] = "invalid view"

    name: str
    location: str | None = None
    view_schema: IcebergSchema = Field(alias="schema")
    view_version: IcebergViewVersion = Field(alias="view-version")
    properties: Properties = Field(default_factory=dict)


class RegisterViewRequest(IcebergRequest):
    name: str
    metadata_location: str = Field(alias="metadata-location")


class CommitViewRequest(IcebergRequest):
    """A view's replacement (``CommitViewRequest``): its requirements and updates."""

    refused_as: ClassVar[str] = "invalid view commit"

    identifier: TableIdentifier | None = None
    requirements: list[IcebergViewRequirement] = Field(default_factory=list)
    updates: list[IcebergViewUpdate] = Field(default_factory=list)


class ReportMetricsRequest(BaseModel):
    """A scan or commit report (``ReportMetricsRequest``): counted by its ``report-type`` and
    otherwise dropped, whatever else it holds."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    report_type: Any = Field(default=None, alias="report-type",
                             description="scan-report or commit-report; any other value is "
                                         "counted as other")


class S3SignRequest(BaseModel):
    """The Iceberg S3 signer API's request: an S3 request to sign."""

    region: str = Field(max_length=64)
    uri: str = Field(max_length=8192)
    method: Literal["PUT", "GET", "HEAD", "POST", "DELETE", "PATCH", "OPTIONS"]
    headers: dict[str, list[str]]
    properties: dict[str, str] | None = None
    body: str | None = None


IcebergExpression = Annotated[SerializableBooleanExpression, _iceberg_object(
    "an Expression (the specification's Predicate): true, false, and, or, not, a unary, "
    "literal or set predicate")]
FieldNames = Annotated[list[Annotated[str, Field(max_length=1000)]], Field(max_length=10_000)]


class PlanTableScanRequest(IcebergRequest):
    """A scan to plan (``PlanTableScanRequest``): a point-in-time scan at ``snapshot-id`` (default:
    the table's current snapshot, in a read session the session's cut), or an incremental scan of
    the appends after ``start-snapshot-id`` up to ``end-snapshot-id``; never both."""

    refused_as: ClassVar[str] = "invalid scan"

    snapshot_id: int | None = Field(default=None, alias="snapshot-id")
    select: FieldNames | None = None
    filter: IcebergExpression | None = None
    min_rows_requested: int | None = Field(default=None, alias="min-rows-requested")
    case_sensitive: StrictBool = Field(default=True, alias="case-sensitive")
    use_snapshot_schema: StrictBool = Field(default=False, alias="use-snapshot-schema")
    start_snapshot_id: int | None = Field(default=None, alias="start-snapshot-id")
    end_snapshot_id: int | None = Field(default=None, alias="end-snapshot-id")
    stats_fields: FieldNames | None = Field(default=None, alias="stats-fields")

    @model_validator(mode="after")
    def _one_kind_of_scan(self) -> PlanTableScanRequest:
        incremental = self.start_snapshot_id is not None or self.end_snapshot_id is not None
        if incremental and self.snapshot_id is not None:
            raise BadRequestError("invalid scan: snapshot-id (a point-in-time scan) and "
                                  "start-snapshot-id/end-snapshot-id (an incremental scan) "
                                  "exclude each other")
        if incremental and (self.start_snapshot_id is None or self.end_snapshot_id is None):
            raise BadRequestError("invalid scan: an incremental scan needs both "
                                  "start-snapshot-id and end-snapshot-id")
        return self


class FetchScanTasksRequest(IcebergRequest):
    """A plan task of a scan plan, whose file scan tasks to fetch (``FetchScanTasksRequest``)."""

    plan_task: str = Field(alias="plan-task", max_length=200)


PlanTableScanRequest.model_rebuild(_types_namespace={"BooleanExpression": BooleanExpression})
