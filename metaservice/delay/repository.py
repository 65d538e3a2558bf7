"""All SQL of the delay answers. Each query is one indexed pass: tables by primary key,
progress records by ``ix_job_progress_finished_at``, barriers by ``ix_barriers_committed_at``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select, text, tuple_
from sqlalchemy.orm import Session

from metaservice.db.models import TableRow
from metaservice.delay.formulas import Percentiles


@dataclass(frozen=True)
class TableLatest:
    id: int
    name: str
    latest_barrier: int | None
    latest_committed_at: int | None


def all_tables(session: Session) -> list[TableLatest]:
    rows = session.execute(select(TableRow.id, TableRow.catalog, TableRow.database, TableRow.name,
                                  TableRow.latest_barrier, TableRow.latest_committed_at)).all()
    return [TableLatest(i, f"{c}.{d}.{t}", b, at) for i, c, d, t, b, at in rows]


def tables_named(session: Session, names: Iterable[str]) -> list[TableLatest]:
    keys = [tuple(n.split(".")) for n in set(names)]
    if not keys:
        return []
    rows = session.execute(select(TableRow.id, TableRow.catalog, TableRow.database, TableRow.name,
                                  TableRow.latest_barrier, TableRow.latest_committed_at)
                           .where(tuple_(TableRow.catalog, TableRow.database, TableRow.name)
                                  .in_(keys))).all()
    return [TableLatest(i, f"{c}.{d}.{t}", b, at) for i, c, d, t, b, at in rows]


def _is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


@dataclass(frozen=True)
class RecentHop:
    """The progress record a job finished last within the window."""

    job: str
    barrier: int
    sources_ready_at: int | None
    finished_at: int


# Nearest-rank percentiles computed by the database, so only a few rows per group leave it,
# whatever the number of samples. Both must agree with delay/formulas.py's percentile (a test
# compares them on both backends). SQLite (>= 3.25): window functions pick, per group, the rows
# ranked ceil(p*n/100) for p = 50, 95, 99 and n (the max); integer division truncates, so
# ceil(p*n/100) is (p*n + 99) / 100.
_PERCENTILE_ROWS = """
SELECT grp, n, rn, v FROM (
    SELECT {group} AS grp, {value} AS v,
           ROW_NUMBER() OVER (PARTITION BY {group} ORDER BY {value}) AS rn,
           COUNT(*) OVER (PARTITION BY {group}) AS n
    FROM {table}
    WHERE {where}
) ranked
WHERE rn = n OR rn = (50 * n + 99) / 100 OR rn = (95 * n + 99) / 100 OR rn = (99 * n + 99) / 100
"""


# PostgreSQL has the ordered-set aggregate itself: percentile_disc(f) is the first value whose
# position reaches f·n, i.e. the nearest rank; one sort per group, no window. Three scalar
# columns rather than one array: psycopg parses a text array in Python, row by row.
_PERCENTILE_AGGREGATE = """
SELECT {group} AS grp, COUNT(*) AS n,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY {value}),
       percentile_disc(0.95) WITHIN GROUP (ORDER BY {value}),
       percentile_disc(0.99) WITHIN GROUP (ORDER BY {value}),
       MAX({value}) AS top
FROM {table}
WHERE {where}
GROUP BY 1
"""

# Grouping by a name needs equality only: the "C" collation sorts by bytes, much faster than a
# locale's rules (PostgreSQL only; SQLite compares bytes anyway).
_BYTES = ' COLLATE "C"'



def _percentiles(session: Session, group: str, value: str, table: str, where: str,
                 params: dict[str, Any], expanding: list[str], *,
                 text_group: bool = False) -> dict[Any, Percentiles]:
    if _is_postgres(session):
        sql = _PERCENTILE_AGGREGATE.format(group=group + (_BYTES if text_group else ""),
                                           value=value, table=table, where=where)
        stmt = text(sql).bindparams(*(bindparam(name, expanding=True) for name in expanding))
        return {g: Percentiles(n, p50, p95, p99, top)
                for g, n, p50, p95, p99, top in session.execute(stmt, params)}
    sql = _PERCENTILE_ROWS.format(group=group, value=value, table=table, where=where)
    stmt = text(sql).bindparams(*(bindparam(name, expanding=True) for name in expanding))
    found: dict[Any, dict[int, int]] = {}
    sizes: dict[Any, int] = {}
    for group, n, rn, value in session.execute(stmt, params):
        found.setdefault(group, {})[int(rn)] = int(value)
        sizes[group] = int(n)
    return {group: Percentiles.from_ranks(sizes[group], ranks)
            for group, ranks in found.items()}


def hop_latency_percentiles(session: Session, *, since_ms: int,
                            jobs: Iterable[str] | None = None) -> dict[str, Percentiles]:
    """Per job, percentiles of ``finished_at − sources_ready_at`` over the committed progress
    records finished at or after ``since_ms`` (``ix_job_progress_finished_at``)."""
    where = ("finished_at >= :since AND state = 'committed' AND sources_ready_at IS NOT NULL"
             + (" AND job_name IN :jobs" if jobs is not None else ""))
    params: dict[str, Any] = {"since": since_ms}
    if jobs is not None:
        params["jobs"] = sorted(set(jobs)) or [""]
    return _percentiles(session, "job_name", "finished_at - sources_ready_at", "job_progress",
                        where, params, ["jobs"] if jobs is not None else [], text_group=True)


def end_to_end_percentiles(session: Session, *, since_ms: int,
                           table_ids: Iterable[int] | None = None) -> dict[int, Percentiles]:
    """Per table, percentiles of ``committed_at − barrier`` over the barriers committed at or
    after ``since_ms`` and not rolled back (``ix_barriers_committed_at``)."""
    where = ("committed_at >= :since AND rolled_back = :no"
             + (" AND table_id IN :ids" if table_ids is not None else ""))
    params: dict[str, Any] = {"since": since_ms, "no": False}
    if table_ids is not None:
        params["ids"] = sorted(set(table_ids)) or [-1]
    return _percentiles(session, "table_id", "committed_at - barrier", "barriers", where, params,
                        ["ids"] if table_ids is not None else [])


def recent_hops(session: Session, *, since_ms: int,
                jobs: Iterable[str] | None = None) -> dict[str, RecentHop]:
    """Per job, the committed progress record finished last at or after ``since_ms``."""
    where = ("finished_at >= :since AND state = 'committed'"
             + (" AND job_name IN :jobs" if jobs is not None else ""))
    stmt = text(f"""
        SELECT job_name, barrier, sources_ready_at, finished_at FROM (
            SELECT job_name, barrier, sources_ready_at, finished_at,
                   ROW_NUMBER() OVER (PARTITION BY job_name{_BYTES if _is_postgres(session) else ""}
                                      ORDER BY finished_at DESC, barrier DESC) AS recent
            FROM job_progress WHERE {where}
        ) ranked WHERE recent = 1""")
    params: dict[str, Any] = {"since": since_ms}
    if jobs is not None:
        stmt = stmt.bindparams(bindparam("jobs", expanding=True))
        params["jobs"] = sorted(set(jobs)) or [""]
    return {job: RecentHop(job, b, r, f) for job, b, r, f in session.execute(stmt, params)}
