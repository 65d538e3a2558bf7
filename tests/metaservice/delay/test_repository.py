"""The database computes the nearest-rank percentiles: they must equal core/delay_formulas.py's."""

from __future__ import annotations

import random

from metaservice.core.delay_formulas import Percentiles
from metaservice.db.models import BarrierRow, JobProgressRow, JobRow, TableRow
from metaservice.db.session import Database
from metaservice.repositories import delay as delay_repo


def test_percentiles_in_sql_match_the_formula(database: Database) -> None:
    rng = random.Random(5)
    values: dict[int, list[int]] = {}
    hops: dict[str, list[int]] = {}
    finished: dict[str, list[tuple[int, int]]] = {}
    with database.transaction(write=True) as session:
        tables = [TableRow(catalog="c", database="d", name=f"t{i}", created_at=0)
                  for i in range(6)]
        session.add_all(tables)
        session.add_all(JobRow(name=f"j{i}", state="running", run=1, registered_at=0,
                               updated_at=0) for i in range(6))
        session.flush()
        for i, table in enumerate(tables):
            n = [1, 2, 3, 19, 20, 101][i]
            for k in range(n):
                latency = rng.randrange(0, 5_000)
                barrier = 1_000_000 + k * 10
                rolled_back = k == 0 and n > 1          # rolled-back barriers do not count
                session.add(BarrierRow(table_id=table.id, barrier=barrier, snapshot_id=k,
                                       committed_at=barrier + latency, rolled_back=rolled_back))
                if not rolled_back:
                    values.setdefault(table.id, []).append(latency)
                ready = barrier + 7
                session.add(JobProgressRow(
                    job_name=f"j{i}", run=1, barrier=barrier, state="committed",
                    started_at=ready, sources_ready_at=ready, finished_at=ready + latency,
                    attempts=1, snapshots={}, previous={}))
                hops.setdefault(f"j{i}", []).append(latency)
                finished.setdefault(f"j{i}", []).append((ready + latency, barrier))
        session.add(BarrierRow(table_id=tables[0].id, barrier=1, snapshot_id=9,
                               committed_at=10))          # before the window
        # j6: records without sources_ready_at (no hop latency), the last two finished at the
        # same time (the greater barrier is the recent one), one uncommitted finished later.
        session.add(JobRow(name="j6", state="running", run=1, registered_at=0, updated_at=0))
        session.flush()
        for barrier, finished_at, state in ((10, 500, "committed"), (30, 900, "committed"),
                                            (20, 900, "committed"), (40, 950, "aborted")):
            session.add(JobProgressRow(
                job_name="j6", run=1, barrier=barrier, state=state, started_at=1,
                sources_ready_at=None, finished_at=finished_at, attempts=1, snapshots={},
                previous={}))
    with database.transaction(write=False) as session:
        e2e = delay_repo.end_to_end_percentiles(session, since_ms=500_000)
        assert e2e == {t: Percentiles.of(v) for t, v in values.items()}
        some = delay_repo.end_to_end_percentiles(session, since_ms=500_000,
                                                 table_ids=[tables[5].id])
        assert some == {tables[5].id: Percentiles.of(values[tables[5].id])}
        assert delay_repo.hop_latency_percentiles(session, since_ms=0) == {
            j: Percentiles.of(v) for j, v in hops.items()}
        assert delay_repo.hop_latency_percentiles(session, since_ms=0, jobs=[]) == {}
        recent = delay_repo.recent_hops(session, since_ms=0, jobs=["j3"])
        last_finished, last_barrier = max(finished["j3"])
        assert list(recent) == ["j3"]
        assert (recent["j3"].finished_at, recent["j3"].barrier) == (last_finished, last_barrier)
        assert delay_repo.recent_hops(session, since_ms=0)["j6"] == delay_repo.RecentHop(
            "j6", 30, None, 900)

        # Together (one statement on PostgreSQL), the same figures.
        for since, jobs in ((0, None), (0, ["j3", "j6"]), (0, []), (10**12, None)):
            both = delay_repo.hop_figures(session, since_ms=since, jobs=jobs)
            assert both.recent == delay_repo.recent_hops(session, since_ms=since, jobs=jobs)
            assert both.latencies == delay_repo.hop_latency_percentiles(
                session, since_ms=since, jobs=jobs)
