"""Who may act for a running job's tables (docs/contract.md#tokens-and-roles,
docs/contract.md#who-changes-a-table): the token that registered the job, or an admin. A name that a
running job writes is given a table only by such a principal."""

from __future__ import annotations

from sqlalchemy.orm import Session

from metaservice.auth.policy import Role
from metaservice.auth.service import Principal
from metaservice.catalog.errors import not_table_owner
from metaservice.db.models import JobRow
from metaservice.names import TableName
from metaservice.repositories import tables as tables_repo


def acts_for_job(session: Session, principal: Principal, job: str) -> bool:
    """Whether ``principal`` may act for ``job``: the token that registered it, or an admin
    (with authentication off every caller is one); a job registered with authentication off
    has no owner (docs/contract.md#tokens-and-roles)."""
    if principal.role == Role.admin:
        return True
    owner = session.get(JobRow, job)
    return owner is None or owner.owner is None or owner.owner == principal.name


def owns_job(session: Session, principal: Principal, job: str) -> bool:
    """Whether ``principal`` is the token that registered ``job`` (with authentication off,
    every caller and every job have no name, and so match; a job registered that way has no
    owner, and any writer acts for it, as the contract (docs/contract.md#tokens-and-roles) lets
    it)."""
    row = session.get(JobRow, job)
    return row is None or row.owner is None or row.owner == principal.name


def refuse_planted(session: Session, name: TableName, principal: Principal) -> None:
    """A name that a running job writes is given a table only by a principal that owns the
    job (or an admin): nobody else plants the table the job will write
    (docs/contract.md#who-changes-a-table)."""
    row = tables_repo.find_table(session, name)
    if (row is not None and row.writer_job is not None
            and not acts_for_job(session, principal, row.writer_job)):
        raise not_table_owner(
            f"{name} is the sink of running job {row.writer_job!r} of another token: only its "
            "token (or an admin) creates it", table=str(name), job=row.writer_job)
