"""MetaService's rules over what a commit changes (docs/contract.md#commits-through-the-catalog),
applied in the commit's write transaction, after its pointer swap: a refusal rolls the swap back
with it.

Who may change a table a running job writes, heads that only move forward (or back under an
applied rollback plan), compactions that take over their parent's barriers, and the barrier and
expiration services a commit reports to.
"""

from __future__ import annotations

import logging
from typing import Any

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from sqlalchemy.orm import Session

from metaservice import errors as domain_errors
from metaservice.auth.policy import Role
from metaservice.auth.service import Principal
from metaservice.barriers import service as barriers_service
from metaservice.catalog.errors import (
    HEAD_NOT_FORWARD,
    BadRequestError,
    RefusedError,
    not_table_owner,
)
from metaservice.catalog.tables import repository as repo
from metaservice.catalog.tables.changes import CommitChanges, StagedCommit
from metaservice.catalog.tables.owners import acts_for_job, owns_job
from metaservice.context import ServiceContext
from metaservice.db.models import TableRow
from metaservice.names import TableName
from metaservice.repositories import rollback as rollback_repo
from metaservice.repositories import tables as tables_repo
from metaservice.retention.expirations import service as expirations_service

logger = logging.getLogger(__name__)


def apply_rules(session: Session, ctx: ServiceContext, staged: StagedCommit,
                 changes: CommitChanges, principal: Principal) -> None:
    """docs/contract.md#the-built-in-catalog: what the commit changes must be allowed, and is
    recorded, here and now."""
    name = staged.name
    try:
        row = tables_repo.find_table(session, name, for_update=not changes.matters)
        derived = row is not None and row.writer_job is not None
        if derived:
            assert row is not None
            _check_derived_update(session, row, staged, changes, principal)
        if not changes.matters:
            return
        if changes.main_removed:
            raise RefusedError(HEAD_NOT_FORWARD,
                               f"main of {name} cannot be removed (it names the table's "
                               "current state; move it forward instead)", {"table": str(name)})
        if changes.moved_back_to is not None:
            _check_rollback(session, name, changes.moved_back_to)
        elif changes.not_forward:
            assert changes.new_main is not None
            if not _rollback_targets(session, name, changes.new_main):
                raise RefusedError(
                    HEAD_NOT_FORWARD,
                    f"main of {name} moves only to a descendant of snapshot {changes.old_main}; "
                    f"snapshot {changes.new_main} is none (a table with history is not "
                    "replaced: overwrite its rows instead)",
                    {"table": str(name), "head": changes.old_main,
                     "snapshot_id": changes.new_main})
        head = changes.new_head
        if head is not None:
            barrier = _barrier(head.barrier)
            # Compaction is maintenance: an admin's, or (of a derived table) its job owner's.
            maintainer = principal.role == Role.admin or (
                derived and row is not None and row.writer_job is not None
                and owns_job(session, principal, row.writer_job))
            if (changes.compaction and maintainer
                    and _same_rows(staged, head.snapshot_id, head.parent_id)):
                assert head.parent_id is not None
                _take_over(session, name, replaced=head.parent_id,
                           replacement=head.snapshot_id)
            elif head.job is not None:
                if not acts_for_job(session, principal, head.job):
                    raise domain_errors.ForbiddenError(
                        f"job {head.job!r} was registered by another token", job=head.job)
                barriers_service.commit(session, ctx, head.job, name, barrier=barrier,
                                        snapshot_id=head.snapshot_id, via_catalog=True)
            else:
                try:
                    barriers_service.report_root(session, ctx, name,
                                                 snapshot_id=head.snapshot_id,
                                                 barrier=barrier, via_catalog=True)
                except domain_errors.TableHasWriterError as exc:
                    raise domain_errors.TableHasWriterError(
                        f"{exc.message}: {JOB_WRITE_HINT}", **exc.details) from None
        if changes.removed_snapshots:
            _expire(session, ctx, name, changes.removed_snapshots)
            # No live session serves a removed snapshot (its lease would have refused the
            # expiration), and no session serves it again: its cut files go.
            staged.removed_cut_files = repo.take_cut_files(
                session, str(staged.metadata.table_uuid), changes.removed_snapshots)
    except domain_errors.MetaServiceError as exc:
        logger.info("catalog_commit_refused", extra={"table": str(name), "code": exc.code})
        raise RefusedError.from_domain(exc, commit=True) from exc
    except RefusedError as exc:
        logger.info("catalog_commit_refused", extra={"table": str(name), "code": exc.code})
        raise


# What a write into a running job's sink lacks when it names no job: the catalog's refusal says
# how an engine names it.
JOB_WRITE_HINT = (
    "a write of the job names the job and its barrier in the snapshot's summary "
    "(metaservice.job, metaservice.barrier): in Spark SQL, SET "
    "`spark.sql.iceberg.snapshot-property.metaservice.job`=<job> and "
    "`spark.sql.iceberg.snapshot-property.metaservice.barrier`=<barrier>, or a DataFrame "
    "write's options snapshot-property.metaservice.job and snapshot-property.metaservice.barrier")


def _check_derived_update(session: Session, row: TableRow, staged: StagedCommit,
                          changes: CommitChanges, principal: Principal) -> None:
    """A table a running job writes changes only through the token that owns that job (its
    barrier commits, and metadata changes that add no snapshot) or an admin's maintenance and
    commits for the job (docs/contract.md#who-changes-a-table): an admin that does not own the job
    changes neither its schema, spec, sort order, location nor its own properties."""
    name, job = staged.name, row.writer_job
    assert job is not None
    if not owns_job(session, principal, job):
        if principal.role != Role.admin:
            raise not_table_owner(
                f"{name} is written by running job {job!r}: only the token that registered it "
                "(or an admin's maintenance) changes it", table=str(name), job=job)
        changed = _metadata_changes(staged.base, staged.metadata)
        if changed:
            raise not_table_owner(
                f"{name} is written by running job {job!r}: an admin's commit there is "
                f"maintenance (compaction, expiration), not a change of {', '.join(changed)}",
                table=str(name), job=job)
    if changes.side_snapshots:
        raise domain_errors.TableHasWriterError(
            f"{name} is written by running job {job!r}: only its barrier commits add snapshots "
            f"(snapshot(s) {changes.side_snapshots} are not on main)",
            table=str(name), writer=job)


def _metadata_changes(base: TableMetadata | None, new: TableMetadata) -> list[str]:
    """What a commit changes of a table besides its snapshots and ``main``: its location,
    schema, partition spec, sort order, format, other refs, and properties other than
    MetaService's own (``metaservice.*``, which barrier commits set)."""
    if base is None:
        return ["the table"]
    def own(properties: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in properties.items() if not k.startswith("metaservice.")}

    def refs(metadata: TableMetadata) -> dict[str, Any]:
        return {k: v for k, v in metadata.refs.items() if k != MAIN_BRANCH}

    checks = {
        "location": base.location != new.location,
        "schema": (base.current_schema_id, len(base.schemas))
        != (new.current_schema_id, len(new.schemas)),
        "partition spec": (base.default_spec_id, len(base.partition_specs))
        != (new.default_spec_id, len(new.partition_specs)),
        "sort order": (base.default_sort_order_id, len(base.sort_orders))
        != (new.default_sort_order_id, len(new.sort_orders)),
        "format version": base.format_version != new.format_version,
        "refs": refs(base) != refs(new),
        "properties": own(base.properties) != own(new.properties),
    }
    return [what for what, differs in checks.items() if differs]


def _same_rows(staged: StagedCommit, snapshot_id: int, parent_id: int | None) -> bool:
    """A compaction rewrites files, not rows: its total record count is its parent's."""
    new = staged.metadata.snapshot_by_id(snapshot_id)
    old = staged.metadata.snapshot_by_id(parent_id) if parent_id is not None else None
    if new is None or old is None or new.summary is None or old.summary is None:
        return False
    new_total = new.summary.additional_properties.get("total-records")
    old_total = old.summary.additional_properties.get("total-records")
    return new_total is not None and new_total == old_total


def _barrier(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise BadRequestError(
            f"metaservice {domain_errors.InvalidRequestError.code}: snapshot property "
            f"metaservice.barrier must be an integer, not {value[:50]!r}") from None


def _take_over(session: Session, name: TableName, *, replaced: int,
               replacement: int) -> None:
    row = tables_repo.find_table(session, name, for_update=True)
    if row is None:
        return
    moved = repo.take_over_barriers(session, row.id, replaced=replaced, replacement=replacement)
    logger.info("catalog_compaction", extra={"table": str(name), "replaced": replaced,
                                             "snapshot_id": replacement, "barriers": moved})


def _expire(session: Session, ctx: ServiceContext, name: TableName,
            removed: list[int]) -> None:
    if tables_repo.find_table(session, name) is None:
        return  # MetaService records nothing of this table: nothing is protected
    approval = expirations_service.request_expiration(session, ctx, name, removed,
                                                      approve_unknown=True)
    refused = [r for r in approval.refused if r.reason != expirations_service.ALREADY_EXPIRED]
    if refused:
        reasons = {str(r.snapshot_id): list(r.reasons) for r in refused}
        raise domain_errors.SnapshotProtectedError(
            f"{len(refused)} snapshot(s) of {name} are protected: "
            + "; ".join(f"{s} ({', '.join(why)})" for s, why in reasons.items()),
            table=str(name), protected=reasons)
    if approval.approved:
        expirations_service.complete_expiration(session, ctx, approval.expiration_id,
                                                approval.approved)


def _rollback_targets(session: Session, name: TableName, snapshot_id: int) -> bool:
    """Whether an applied rollback plan targets ``name`` at ``snapshot_id``."""
    row = tables_repo.find_table(session, name)
    if row is None:
        return False
    return rollback_repo.fence_target(session, row.id, str(name)) == snapshot_id


def _check_rollback(session: Session, name: TableName, snapshot_id: int) -> None:
    if tables_repo.find_table(session, name) is None:
        return  # no barrier of this table is recorded: moving main back breaks nothing
    if not _rollback_targets(session, name, snapshot_id):
        raise domain_errors.RollbackPlanNotAppliedError(
            f"main of {name} may move back to snapshot {snapshot_id} only under an applied "
            "rollback plan that targets it", table=str(name), snapshot_id=snapshot_id)
