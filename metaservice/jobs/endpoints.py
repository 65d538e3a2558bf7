"""HTTP only: plan (register), start, stop and inspect jobs."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query

from metaservice.auth.dependencies import CurrentPrincipal
from metaservice.auth.service import Principal
from metaservice.barriers.schemas import position_answer
from metaservice.context import ServiceContext
from metaservice.deps import Context, ReadSession, Transactions, TransactionsDep, WriteSession
from metaservice.jobs import service
from metaservice.jobs.schemas import JobList, JobOut, StartIn, StartOut
from metaservice.jobs.service import Role
from metaservice.names import TableName
from metaservice.path_params import CatalogPath, DatabasePath, JobPath, TablePath

router = APIRouter(tags=["jobs"])


@router.post("/register/source/{job}/{catalog}/{database}/{table}", response_model=JobOut,
             operation_id="register_source")
def register_source(job: JobPath, catalog: CatalogPath, database: DatabasePath,
                    table: TablePath, transactions: TransactionsDep, ctx: Context,
                    principal: CurrentPrincipal) -> JobOut:
    """Plan: job reads the table. Idempotent."""
    return _register(transactions, ctx, job, "source", TableName(catalog, database, table),
                     principal)


@router.post("/register/sink/{job}/{catalog}/{database}/{table}", response_model=JobOut,
             operation_id="register_sink")
def register_sink(job: JobPath, catalog: CatalogPath, database: DatabasePath,
                  table: TablePath, transactions: TransactionsDep, ctx: Context,
                  principal: CurrentPrincipal) -> JobOut:
    """Plan: job writes the table. Idempotent."""
    return _register(transactions, ctx, job, "sink", TableName(catalog, database, table),
                     principal)


def _register(transactions: Transactions, ctx: ServiceContext, job: str, role: Role,
              table: TableName, principal: Principal) -> JobOut:
    """An edge a running job already has is answered by a read; anything else is a write."""
    return JobOut.of(transactions.read_then_write(
        lambda session: service.registered_running(session, job, role, table, principal),
        lambda session: service.register(session, ctx, job, role, table, principal)))


@router.post("/jobs/{job}/start", response_model=StartOut, response_model_exclude_unset=True,
             operation_id="start_job")
def start_job(job: JobPath, session: WriteSession, ctx: Context, principal: CurrentPrincipal,
              body: Annotated[StartIn | None, Body()] = None) -> dict:
    """The job starts: it becomes the only writer of its sinks and gets its aligned, pinned
    start position. Starting a running job again answers its pinned position.

    The answer always carries ``barrier`` and ``previous`` (docs/contract.md#start): both ``null``
    when the job waits, ``barrier`` ``null`` when it has no sources."""
    started = service.start(session, ctx, job, (body or StartIn()).start_from, principal)
    position = position_answer(started.position)
    return {"job": job, "run": started.view.job.run, "state": started.view.job.state,
            **position, "barrier": position.get("barrier"), "previous": position.get("previous")}


@router.post("/unregister/{job}", response_model=JobOut, operation_id="unregister_job")
def unregister_job(job: JobPath, session: WriteSession, ctx: Context,
                   principal: CurrentPrincipal) -> JobOut:
    """The job terminated: its edges leave the topology; its history stays. Idempotent."""
    return JobOut.of(service.unregister(session, ctx, job, principal))


@router.get("/jobs", response_model=JobList, operation_id="list_jobs")
def list_jobs(session: ReadSession, ctx: Context,
              state: Annotated[Literal["planned", "running", "terminated"] | None,
                               Query()] = None) -> JobList:
    return JobList(jobs=[JobOut.of(v) for v in service.list_all(session, ctx, state)])


@router.get("/jobs/{job}", response_model=JobOut, operation_id="get_job")
def get_job(job: JobPath, session: ReadSession, ctx: Context) -> JobOut:
    return JobOut.of(service.get(session, ctx, job))
