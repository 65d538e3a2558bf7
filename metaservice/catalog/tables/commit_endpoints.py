"""The catalog's commit routes (HTTP only), under ``/iceberg``: a commit to one table, and a
transaction over several (``commits.py`` has the rules)."""

from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks, Request, Response
from pyiceberg.table import CommitTableRequest as PyIcebergCommitTableRequest

from metaservice.catalog import idempotency
from metaservice.catalog.deps import PREFIX, levels, principal, site
from metaservice.catalog.requests import CommitTableRequest, CommitTransactionRequest
from metaservice.catalog.schemas import ICEBERG_ERROR_RESPONSES
from metaservice.catalog.site import CatalogSite, namespace_name
from metaservice.catalog.tables import commits
from metaservice.catalog.tables import service as tables
from metaservice.catalog.tables.answers import table_response
from metaservice.catalog.tables.idempotent import KEY_HEADER, idempotent
from metaservice.deps import Context, DatabaseDep

router = APIRouter(prefix=PREFIX, tags=["iceberg"], responses=ICEBERG_ERROR_RESPONSES)


@router.post("/v1/namespaces/{namespace}/tables/{table}", operation_id="iceberg_commit_table")
def commit_table(request: Request, database: DatabaseDep, ctx: Context, namespace: str,
                 table: str, body: CommitTableRequest, background: BackgroundTasks) -> Response:
    """Commit updates to a table; the rules of docs/contract.md#commits-through-the-catalog apply in
    the same transaction."""
    name = namespace_name(levels(namespace))
    change = body.for_table(name, table)
    catalog, who = site(request), principal(request)

    def run(guard: idempotency.Guard | None) -> Response:
        (staged,) = commits.commit_tables(database, ctx, catalog, [(name, table, change)], who,
                                          guard)
        if guard is not None:
            guard.outcome = {"metadata-location": staged.metadata_location}
        _delete_removed_cut_files(catalog, background, [staged])
        return table_response(tables.loaded(catalog, staged.metadata_location))

    if KEY_HEADER not in request.headers:  # the hot path: no key to replay or record
        return run(None)
    return idempotent(request, database, ctx, "commitTable", 200, run, body, run_reads_key=True)


@router.post("/v1/transactions/commit", status_code=204,
             operation_id="iceberg_commit_transaction")
def commit_transaction(request: Request, database: DatabaseDep, ctx: Context,
                       body: CommitTransactionRequest, background: BackgroundTasks) -> Response:
    """Commit to several tables at once: every table or none."""
    changes: list[tuple[str, str, PyIcebergCommitTableRequest]] = []
    for change in body.table_changes:
        name = namespace_name(change.identifier.namespace)
        changes.append((name, change.identifier.name,
                        change.for_table(name, change.identifier.name)))

    catalog, who = site(request), principal(request)

    def run(guard: idempotency.Guard | None) -> Response:
        staged = commits.commit_tables(database, ctx, catalog, changes, who, guard)
        _delete_removed_cut_files(catalog, background, staged)
        return Response(status_code=204)

    if KEY_HEADER not in request.headers:
        return run(None)
    return idempotent(request, database, ctx, "commitTransaction", 204, run, body,
                      run_reads_key=True)


def _delete_removed_cut_files(catalog: CatalogSite, background: BackgroundTasks,
                              staged: list[commits.StagedCommit]) -> None:
    """The cut files of snapshots a commit removed go after it committed (the response, and
    so the background task, comes after the commit)."""
    removed = [location for one in staged for location in one.removed_cut_files]
    if removed:
        background.add_task(catalog.warehouse.delete_cut_files, removed)
