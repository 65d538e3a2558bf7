"""Bulk-loading a realistic pipeline straight into a migrated database (no HTTP), so the
benchmarks can start from 10⁶ barrier rows in seconds.

The shape: ``chains`` pipelines of ``length`` tables, ``lake.p<c>.t<k>``. Table ``t0`` of each
pipeline is written by an ingestion job with no sources (``ingest-<c>``), table ``t<k>`` by job
``p<c>-j<k>`` reading ``t<k-1>`` — and, with ``cross_links``, also ``t<k-1>`` of the next
pipelines (fan-in, still acyclic: edges only go from position k-1 to k). Every job is running.
Each table has ``barriers_per_table`` completed barriers one minute apart; table ``t<k>`` is k
minutes behind ``t0``, as a real pipeline is, so the strong cut of a pipeline is its last
table's latest barrier. Snapshot ids are random signed 64-bit integers, like Iceberg's.

``shape="fan-out"`` builds the other common shape instead: in each pipeline ``t0`` is the root
and ``t1``…``t<length-1>`` are the sinks of sibling jobs ``p<c>-j<k>`` that all read ``t0``
(one component of ``length`` tables). Sibling ``k`` trails the root by 1–4 barriers (varying
with ``c`` and ``k``), and the odd siblings completed only every other barrier (the even ones
of the root's): they skipped, so their sinks are exact only at the barriers they completed, and
the strong cut of a pipeline is not simply its smallest ``latest``. :meth:`Pipelines.
strong_cut` computes the expected cut from the loaded barrier sets alone, without the server's
exactness code: the root changes at every barrier, so a sibling's sink is exact exactly at the
barriers it completed, and the cut is the greatest barrier ≤ the pipeline's smallest ``latest``
that every table completed.

Rows go in with PostgreSQL ``COPY`` or SQLite ``executemany`` in one transaction; the columns
written are only those of the first migration, everything else takes its server default.
"""

from __future__ import annotations

import io
import random
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlalchemy.engine import make_url

BASE_BARRIER = 1_700_000_000_000
STEP_MS = 60_000


@dataclass
class Pipelines:
    chains: int
    length: int
    barriers_per_table: int
    cross_links: int = 0
    shape: str = "chain"  # or "fan-out"
    jobs: int = 0
    barrier_rows: int = 0
    # snapshot id of (chain, position, barrier index), for checking answers
    _seed: int = 0
    names: list[list[str]] = field(default_factory=list)
    _cuts: dict[int, int] = field(default_factory=dict)

    def table(self, chain: int, position: int) -> str:
        return f"lake.p{chain}.t{position}"

    def chain(self, chain: int) -> list[str]:
        return [self.table(chain, k) for k in range(self.length)]

    def latest(self, position: int, chain: int = 0) -> int:
        """latest(T) of the table at ``position`` of pipeline ``chain`` (for chains, the same
        in every pipeline)."""
        if self.shape == "fan-out":
            return self.barrier(chain, position, self.completed(chain, position)[-1])
        return BASE_BARRIER + (self.barriers_per_table - 1 - position) * STEP_MS

    def barrier(self, chain: int, position: int, index: int) -> int:
        """The barrier of the ``index``-th step of the root, as table ``position`` holds it."""
        shift = 0 if self.shape == "fan-out" else position
        return BASE_BARRIER + (index - shift) * STEP_MS

    def lag(self, chain: int, position: int) -> int:
        """Fan-out: how many root barriers sibling ``position`` of pipeline ``chain`` trails."""
        return 0 if position == 0 else 1 + chain % 3 + (position % 4 == 0)

    def skips(self, position: int) -> bool:
        """Fan-out: the odd siblings completed only every other barrier."""
        return self.shape == "fan-out" and position % 2 == 1

    def completed(self, chain: int, position: int) -> range:
        """The indexes (``barrier(chain, position, index)``) of the barriers the table
        completed."""
        if self.shape != "fan-out":
            return range(self.barriers_per_table)
        last = self.barriers_per_table - 1 - self.lag(chain, position)
        return range(0, last + 1, 2) if self.skips(position) else range(last + 1)

    def strong_cut(self, chain: int) -> int:
        """The expected strong cut of one pipeline (without cross links).

        Chain: every table completed every barrier of its own, so the cut is the last table's
        latest. Fan-out: the greatest barrier ≤ the smallest latest of the pipeline that every
        table completed (a sibling's sink is exact only there: its source, the root, changed at
        every barrier in between).
        """
        if self.shape != "fan-out":
            return self.latest(self.length - 1)
        if chain not in self._cuts:
            common = set(self.completed(chain, 0))
            for k in range(1, self.length):
                common &= set(self.completed(chain, k))
            lowest = min(self.completed(chain, k)[-1] for k in range(self.length))
            self._cuts[chain] = self.barrier(chain, 0, max(i for i in common if i <= lowest))
        return self._cuts[chain]

    @property
    def tables(self) -> int:
        return self.chains * self.length


def _barrier_rows(p: Pipelines, table_ids: dict[tuple[int, int], int],
                  rng: random.Random) -> Iterator[tuple[int, int, int, int, str, int]]:
    for (c, k), table_id in table_ids.items():
        writer = f"ingest-{c}" if k == 0 else f"p{c}-j{k}"
        for j in p.completed(c, k):
            barrier = p.barrier(c, k, j)
            yield (table_id, barrier, rng.getrandbits(64) - (1 << 63), barrier + 5_000, writer, 1)


def _plan(p: Pipelines) -> tuple[list[tuple[int, int]], list[tuple[str, list[tuple[int, int]],
                                                                      tuple[int, int]]]]:
    tables = [(c, k) for c in range(p.chains) for k in range(p.length)]
    jobs: list[tuple[str, list[tuple[int, int]], tuple[int, int]]] = []
    for c in range(p.chains):
        jobs.append((f"ingest-{c}", [], (c, 0)))
        for k in range(1, p.length):
            if p.shape == "fan-out":
                jobs.append((f"p{c}-j{k}", [(c, 0)], (c, k)))
                continue
            sources = [(c, k - 1)] + [((c + i) % p.chains, k - 1)
                                      for i in range(1, p.cross_links + 1) if p.chains > i]
            jobs.append((f"p{c}-j{k}", sources, (c, k)))
    return tables, jobs


def load(database_url: str, *, chains: int, length: int, barriers_per_table: int,
         cross_links: int = 0, shape: str = "chain", seed: int = 42) -> Pipelines:
    """Load the pipelines into the (migrated, empty) database at ``database_url``."""
    if shape not in ("chain", "fan-out"):
        raise ValueError(f"unknown shape {shape!r}")
    if shape == "fan-out" and cross_links:
        raise ValueError("fan-out pipelines have no cross links")
    p = Pipelines(chains, length, barriers_per_table, cross_links, shape, _seed=seed)
    p.names = [p.chain(c) for c in range(chains)]
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        _load_sqlite(url.database or "", p, random.Random(seed))
    else:
        _load_postgres(database_url, p, random.Random(seed))
    return p


def _table_values(p: Pipelines, c: int, k: int) -> tuple:
    latest = p.latest(k, c)
    writer = f"ingest-{c}" if k == 0 else f"p{c}-j{k}"
    return ("lake", f"p{c}", f"t{k}", BASE_BARRIER - 86_400_000, latest, None, latest + 5_000,
            writer)


TABLE_COLUMNS = ("catalog, database, name, created_at, latest_barrier, latest_snapshot_id, "
                 "latest_committed_at, writer_job")
JOB_COLUMNS = "name, state, run, registered_at, started_at, updated_at, last_committed_barrier"
BARRIER_COLUMNS = "table_id, barrier, snapshot_id, committed_at, writer_job, writer_run"


def _load_postgres(database_url: str, p: Pipelines, rng: random.Random) -> None:
    import psycopg

    from benchmarks._environment import libpq_url

    tables, jobs = _plan(p)
    with psycopg.connect(libpq_url(database_url)) as conn:
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO tables ({TABLE_COLUMNS}) VALUES "
                            "(%s, %s, %s, %s, %s, %s, %s, %s)",
                            [_table_values(p, c, k) for c, k in tables])
            cur.execute("SELECT id, database, name FROM tables WHERE catalog = 'lake'")
            ids = {(int(d[1:]), int(n[1:])): i for i, d, n in cur.fetchall()}
            _insert_jobs(cur, p, jobs, ids, "%s")
            buffer = io.StringIO()
            latest: dict[int, tuple[int, int]] = {}
            for row in _barrier_rows(p, ids, rng):
                buffer.write("\t".join(map(str, row)) + "\n")
                latest[row[0]] = (row[1], row[2])
                p.barrier_rows += 1
            buffer.seek(0)
            with cur.copy(f"COPY barriers ({BARRIER_COLUMNS}) FROM STDIN") as copy:
                while chunk := buffer.read(1 << 20):
                    copy.write(chunk)
            cur.executemany("UPDATE tables SET latest_snapshot_id = %s WHERE id = %s",
                            [(s, t) for t, (_, s) in latest.items()])
            cur.execute("UPDATE topology_state SET version = version + 1 WHERE id = 1")
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")


def _load_sqlite(path: str, p: Pipelines, rng: random.Random) -> None:
    tables, jobs = _plan(p)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=OFF")  # loading only; the server sets FULL again
        conn.execute("BEGIN")
        cur = conn.cursor()
        cur.executemany(f"INSERT INTO tables ({TABLE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [_table_values(p, c, k) for c, k in tables])
        ids = {(int(d[1:]), int(n[1:])): i for i, d, n in
               cur.execute("SELECT id, database, name FROM tables WHERE catalog = 'lake'")}
        _insert_jobs(cur, p, jobs, ids, "?")
        latest: dict[int, tuple[int, int]] = {}

        def rows() -> Iterator[tuple]:
            for row in _barrier_rows(p, ids, rng):
                latest[row[0]] = (row[1], row[2])
                p.barrier_rows += 1
                yield row

        cur.executemany(f"INSERT INTO barriers ({BARRIER_COLUMNS}, rolled_back) "
                        "VALUES (?, ?, ?, ?, ?, ?, 0)", rows())
        cur.executemany("UPDATE tables SET latest_snapshot_id = ? WHERE id = ?",
                        [(s, t) for t, (_, s) in latest.items()])
        cur.execute("UPDATE topology_state SET version = version + 1 WHERE id = 1")
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        conn.close()


def _insert_jobs(cur, p: Pipelines, jobs: list, ids: dict[tuple[int, int], int],  # type: ignore[no-untyped-def]
                 mark: str) -> None:
    started = BASE_BARRIER - 3_600_000
    job_rows, edge_rows = [], []
    for name, sources, sink in jobs:
        job_rows.append((name, "running", 1, started, started, started,
                         p.latest(sink[1], sink[0])))
        edge_rows += [(name, ids[s], "source") for s in sources]
        edge_rows.append((name, ids[sink], "sink"))
    marks = ", ".join([mark] * 7)
    cur.executemany(f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES ({marks})", job_rows)
    cur.executemany(f"INSERT INTO job_tables (job_name, table_id, role) VALUES "
                    f"({mark}, {mark}, {mark})", edge_rows)
    p.jobs = len(job_rows)
