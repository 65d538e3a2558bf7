"""All SQL of the delay answers. Each query is one indexed pass: tables by primary key,
progress records by ``ix_job_progress_finished_at``, barriers by ``ix_barriers_committed_at``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import astuple, dataclass
from typing import Any, NamedTuple

from sqlalchemy import Result, TextClause, bindparam, select, text, tuple_
from sqlalchemy.orm import Session

from metaservice.core.delay_formulas import Percentiles
from metaservice.db.engine import on_postgres
from metaservice.db.models import TableRow
from metaservice.db.rows import named_rows
from metaservice.names import TableName, qualified


@dataclass(frozen=True)
class TableLatest:
    id: int
    name: str
    latest_barrier: int | None
    latest_committed_at: int | None
    catching_up: bool = False


_TABLES = select(TableRow.id, TableRow.catalog, TableRow.database, TableRow.name,
                 TableRow.latest_barrier, TableRow.latest_committed_at, TableRow.catching_up)


class _TableRow(NamedTuple):
    id: int
    catalog: str
    database: str
    name: str
    latest_barrier: int | None
    latest_committed_at: int | None
    catching_up: bool


def _table_latest(rows: Result[*tuple[Any, ...]]) -> list[TableLatest]:
    return [TableLatest(r.id, qualified(r.catalog, r.database, r.name), r.latest_barrier,
                        r.latest_committed_at, bool(r.catching_up))
            for r in named_rows(rows, _TableRow)]


def all_tables(session: Session) -> list[TableLatest]:
    return _table_latest(session.execute(_TABLES))


def tables_named(session: Session, names: Iterable[str]) -> list[TableLatest]:
    keys = [astuple(TableName.parse(n)) for n in set(names)]
    if not keys:
        return []
    return _table_latest(session.execute(
        _TABLES.where(tuple_(TableRow.catalog, TableRow.database, TableRow.name).in_(keys))))


def _statement(sql: str, expanding: Iterable[str]) -> TextClause:
    """``sql`` with each name of ``expanding`` bound to a list (``IN :name``)."""
    return text(sql).bindparams(*(bindparam(name, expanding=True) for name in expanding))


@dataclass(frozen=True)
class RecentHop:
    """The progress record a job finished last within the window."""

    job: str
    barrier: int
    sources_ready_at: int | None
    finished_at: int


# Nearest-rank percentiles (core/delay_formulas.py's; a test compares them on both backends).
# PostgreSQL computes them (below), so only one row per group leaves it. SQLite hands each
# group's samples over as one string (group_concat, which skips NULLs) and Python sorts them:
# its window functions ranking the same samples cost four times more CPU, and one result row
# per sample twice as much.
# PostgreSQL has the ordered-set aggregate itself: percentile_disc(f) is the first value whose
# position reaches f·n, i.e. the nearest rank; one sort per group, no window. Three scalar
# columns rather than one array: psycopg parses a text array in Python, row by row.
_PERCENTILE_AGGREGATE = """
SELECT {group} AS grp, COUNT(*) AS n,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY {value}) AS p50,
       percentile_disc(0.95) WITHIN GROUP (ORDER BY {value}) AS p95,
       percentile_disc(0.99) WITHIN GROUP (ORDER BY {value}) AS p99,
       MAX({value}) AS top
FROM {table}
WHERE {where}
GROUP BY 1
"""


class _PercentilesRow(NamedTuple):
    grp: Any
    n: int
    p50: int
    p95: int
    p99: int
    top: int


# SQLite, grouping the rows of a time window: without statistics its planner walks the primary
# key to group them, the whole table, however small the window; the window's index is named.
_PROGRESS_WINDOW = "INDEXED BY ix_job_progress_finished_at"

# Grouping by a name needs equality only: the "C" collation sorts by bytes, much faster than a
# locale's rules (PostgreSQL only; SQLite compares bytes anyway).
_BYTES = ' COLLATE "C"'



def _percentiles(session: Session, group: str, value: str, table: str, where: str,
                 params: dict[str, Any], expanding: list[str], *, window_index: str,
                 text_group: bool = False) -> dict[Any, Percentiles]:
    """Per ``group``, the percentiles of ``value`` over the rows of ``table`` that ``where``
    keeps; ``window_index`` is the index of the time window's column, which SQLite must be told
    (see _PROGRESS_WINDOW)."""
    if on_postgres(session):
        sql = _PERCENTILE_AGGREGATE.format(group=group + (_BYTES if text_group else ""),
                                           value=value, table=table, where=where)
        return {row.grp: Percentiles(row.n, row.p50, row.p95, row.p99, row.top)
                for row in named_rows(session.execute(_statement(sql, expanding), params),
                                      _PercentilesRow)}
    return {key: Percentiles.of(_integers(joined)) for key, joined in session.execute(
        _statement(f"SELECT {group}, group_concat({value}) FROM {table} "
                   f"INDEXED BY {window_index} WHERE {where} GROUP BY 1", expanding), params)}


def _integers(joined: str | None) -> list[int]:
    """The integers of a ``group_concat`` (None: the group had no sample)."""
    return [int(v) for v in joined.split(",")] if joined is not None else []


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
                        where, params, ["jobs"] if jobs is not None else [],
                        window_index="ix_job_progress_finished_at", text_group=True)


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
                        ["ids"] if table_ids is not None else [],
                        window_index="ix_barriers_committed_at")


def recent_hops(session: Session, *, since_ms: int,
                jobs: Iterable[str] | None = None) -> dict[str, RecentHop]:
    """Per job, the committed progress record finished last at or after ``since_ms``."""
    where = ("finished_at >= :since AND state = 'committed'"
             + (" AND job_name IN :jobs" if jobs is not None else ""))
    sql = f"""
        SELECT job_name, barrier, sources_ready_at, finished_at FROM (
            SELECT job_name, barrier, sources_ready_at, finished_at,
                   ROW_NUMBER() OVER (PARTITION BY job_name{_BYTES if on_postgres(session) else ""}
                                      ORDER BY finished_at DESC, barrier DESC) AS recent
            FROM job_progress WHERE {where}
        ) ranked WHERE recent = 1"""
    params: dict[str, Any] = {"since": since_ms}
    if jobs is not None:
        params["jobs"] = sorted(set(jobs)) or [""]
    rows = session.execute(_statement(sql, ["jobs"] if jobs is not None else []), params)
    return {r.job_name: RecentHop(r.job_name, r.barrier, r.sources_ready_at, r.finished_at)
            for r in rows}


@dataclass(frozen=True)
class HopFigures:
    """Per job, over the committed progress records finished in the window: the one finished
    last (:func:`recent_hops`) and the hop latency percentiles
    (:func:`hop_latency_percentiles`)."""

    recent: dict[str, RecentHop]
    latencies: dict[str, Percentiles]


# PostgreSQL: both from one pass over the window's progress records. Percentile aggregates skip
# the NULL latencies of records without ``sources_ready_at``, as the separate query's filter
# does; the record finished last comes from aggregates ordered like recent_hops' window.
_HOP_FIGURES = """
SELECT job_name COLLATE "C" AS job_name,
       COUNT(finished_at - sources_ready_at) AS n,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY finished_at - sources_ready_at) AS p50,
       percentile_disc(0.95) WITHIN GROUP (ORDER BY finished_at - sources_ready_at) AS p95,
       percentile_disc(0.99) WITHIN GROUP (ORDER BY finished_at - sources_ready_at) AS p99,
       MAX(finished_at - sources_ready_at) AS top,
       (array_agg(barrier ORDER BY finished_at DESC, barrier DESC))[1] AS barrier,
       (array_agg(sources_ready_at ORDER BY finished_at DESC, barrier DESC))[1]
           AS sources_ready_at,
       MAX(finished_at) AS finished_at
FROM job_progress
WHERE finished_at >= :since AND state = 'committed'{jobs}
GROUP BY 1
"""


class _HopFiguresRow(NamedTuple):
    job_name: str
    n: int
    p50: int | None
    p95: int | None
    p99: int | None
    top: int | None
    barrier: int
    sources_ready_at: int | None
    finished_at: int


def hop_figures(session: Session, *, since_ms: int,
                jobs: Iterable[str] | None = None) -> HopFigures:
    """:func:`recent_hops` and :func:`hop_latency_percentiles` together, from one statement
    instead of two passes over the same records."""
    params: dict[str, Any] = {"since": since_ms}
    jobs_filter = "" if jobs is None else " AND job_name IN :jobs"
    if jobs is not None:
        params["jobs"] = sorted(set(jobs)) or [""]
    expanding = ["jobs"] if jobs is not None else []
    recent: dict[str, RecentHop] = {}
    latencies: dict[str, Percentiles] = {}
    if on_postgres(session):
        for r in named_rows(session.execute(
                _statement(_HOP_FIGURES.format(jobs=jobs_filter), expanding), params),
                _HopFiguresRow):
            recent[r.job_name] = RecentHop(r.job_name, r.barrier, r.sources_ready_at,
                                           r.finished_at)
            if r.n:
                latencies[r.job_name] = Percentiles(r.n, r.p50, r.p95, r.p99, r.top)
        return HopFigures(recent, latencies)
    window = f"finished_at >= :since AND state = 'committed'{jobs_filter}"
    for job, joined in session.execute(_statement(
            "SELECT job_name, group_concat(finished_at - sources_ready_at) "
            f"FROM job_progress {_PROGRESS_WINDOW} WHERE {window} GROUP BY 1", expanding), params):
        if joined is not None:
            latencies[job] = Percentiles.of(_integers(joined))
    # The records each job finished last (several when they finished in the same millisecond:
    # the greatest barrier is the last, as on PostgreSQL).
    for job, barrier, ready, finished in session.execute(_statement(
            "SELECT job_name, barrier, sources_ready_at, finished_at FROM job_progress "
            f"WHERE {window} AND (job_name, finished_at) IN "
            f"(SELECT job_name, MAX(finished_at) FROM job_progress {_PROGRESS_WINDOW} "
            f"WHERE {window} GROUP BY 1)",
            expanding), params):
        seen = recent.get(job)
        if seen is None or barrier > seen.barrier:
            recent[job] = RecentHop(job, barrier, ready, finished)
    return HopFigures(recent, latencies)
