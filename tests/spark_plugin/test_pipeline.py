"""A two-level pipeline run barrier by barrier on the real server:

    orders (root) → job A → doubled → job C → final

A doubles every amount, C adds one, both incrementally (``read_changes``, append). So at any
barrier X: ``count(final@X) == count(orders@X)`` and
``sum(final@X) == 2 * sum(orders@X) + count(orders@X)``. Strong reads taken while the pipeline
runs (between every action, and from a concurrent reader thread) always satisfy it; naive
latest-snapshot reads do not.
"""

from __future__ import annotations

import threading

import pytest

import spark_plugin as sp
from spark_plugin import _iceberg as ice

pytestmark = pytest.mark.spark

BATCHES = [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10], [11, 12]]


def totals(df) -> tuple[int, int]:
    row = df.selectExpr("count(*) AS n", "coalesce(sum(amount), 0) AS s").collect()[0]
    return int(row.n), int(row.s)


def invariant_holds(orders: tuple[int, int], final: tuple[int, int]) -> bool:
    return final == (orders[0], 2 * orders[1] + orders[0])


def naive_totals(catalog, name: str) -> tuple[int, int]:
    """What a reader sees with the latest Iceberg snapshot of each table, uncoordinated."""
    data = ice.load_table(name, catalog).scan().to_arrow()
    return data.num_rows, int(sum(data["amount"].to_pylist()))


class Pipeline:
    def __init__(self, spark, catalog, client, database: str) -> None:
        self.spark, self.catalog, self.client = spark, catalog, client
        self.orders, self.doubled, self.final = (f"lake.{database}.{t}"
                                                 for t in ("orders", "doubled", "final"))
        schema = spark.createDataFrame([], "id long, amount long").schema
        for t in (self.orders, self.doubled, self.final):
            sp.create_table_from_spark_schema(t, schema, catalog=catalog)
        self.job_a = sp.BarrierJob(spark, f"{database}.A", [self.orders], [self.doubled],
                                   client=client, catalog=catalog)
        self.job_c = sp.BarrierJob(spark, f"{database}.C", [self.doubled], [self.final],
                                   client=client, catalog=catalog)

    def ingest(self, barrier: int, ids: list[int]) -> None:
        df = self.spark.createDataFrame([(i, i * 10) for i in ids], "id long, amount long")
        sp.append_root(self.spark, df, self.orders, client=self.client, catalog=self.catalog,
                       barrier=barrier)

    @staticmethod
    def run_step(job: sp.BarrierJob, source: str, sink: str, expression: str) -> int:
        step = job.wait_next(timeout_seconds=30)
        assert step is not None
        changes = step.read_changes(source).selectExpr("id", f"{expression} AS amount")
        step.write(sink, changes, mode="overwrite" if step.is_initial else "append")
        step.commit()
        return step.barrier

    def step_a(self) -> int:
        return self.run_step(self.job_a, self.orders, self.doubled, "amount * 2")

    def step_c(self) -> int:
        return self.run_step(self.job_c, self.doubled, self.final, "amount + 1")


def strong_totals(spark, pipeline: Pipeline) -> tuple[int, tuple[int, int], tuple[int, int]]:
    with sp.consistent_read(spark, [pipeline.orders, pipeline.final], "strong",
                            client=pipeline.client, catalog=pipeline.catalog) as frames:
        barriers = {v.barrier for v in frames.versions.values()}
        assert len(barriers) == 1, frames.versions
        return (barriers.pop(), totals(frames[pipeline.orders]),
                totals(frames[pipeline.final]))


def test_strong_reads_satisfy_the_invariant_naive_reads_do_not(spark, catalog, client,
                                                               database):
    pipeline = Pipeline(spark, catalog, client, database)
    strong: list[tuple[int, tuple[int, int], tuple[int, int]]] = []
    naive: list[tuple[tuple[int, int], tuple[int, int]]] = []
    background: list[tuple[int, tuple[int, int], tuple[int, int]]] = []
    background_errors: list[BaseException] = []
    stop = threading.Event()

    def observe() -> None:
        strong.append(strong_totals(spark, pipeline))
        naive.append((naive_totals(catalog, pipeline.orders),
                      naive_totals(catalog, pipeline.final)))

    def reader() -> None:
        while not stop.is_set():
            try:
                background.append(strong_totals(spark, pipeline))
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                background_errors.append(exc)
                return

    with pipeline.job_a, pipeline.job_c:
        pipeline.ingest(1_000, BATCHES[0])
        assert (pipeline.step_a(), pipeline.step_c()) == (1_000, 1_000)
        observe()
        thread = threading.Thread(target=reader, name="strong-reader", daemon=True)
        thread.start()
        try:
            for k, ids in enumerate(BATCHES[1:], start=2):
                pipeline.ingest(k * 1_000, ids)
                observe()
                assert pipeline.step_a() == k * 1_000
                observe()
                assert pipeline.step_c() == k * 1_000
                observe()
        finally:
            stop.set()
            thread.join(timeout=120)

    assert not background_errors, background_errors
    assert background, "the concurrent reader never completed a read"
    for barrier, orders, final in strong + background:
        assert invariant_holds(orders, final), (barrier, orders, final)
    assert [b for b, _, _ in strong] == sorted(b for b, _, _ in strong)  # never backwards
    assert strong[-1][0] == len(BATCHES) * 1_000
    all_ids = [i for b in BATCHES for i in b]
    assert strong[-1][1] == (len(all_ids), 10 * sum(all_ids))
    violations = [(o, f) for o, f in naive if not invariant_holds(o, f)]
    assert violations, "naive reads were expected to see the tables at different points"
    assert len(violations) >= len(BATCHES) - 1


def test_explicit_barrier_reads_are_reproducible(spark, catalog, client, database):
    pipeline = Pipeline(spark, catalog, client, database)
    with pipeline.job_a, pipeline.job_c:
        for k, ids in enumerate(BATCHES[:3], start=1):
            pipeline.ingest(k * 1_000, ids)
            pipeline.step_a()
            pipeline.step_c()
    tables = [pipeline.orders, pipeline.doubled, pipeline.final]
    with sp.consistent_read(spark, tables, barrier=2_000, client=client,
                            catalog=catalog) as frames:
        assert frames.consistency == "barrier"
        first = [totals(frames[t]) for t in tables]
    with sp.consistent_read(spark, tables, barrier=2_000, client=client,
                            catalog=catalog) as frames:
        assert [totals(frames[t]) for t in tables] == first
    ids = BATCHES[0] + BATCHES[1]
    assert first[0] == (len(ids), 10 * sum(ids))
    assert invariant_holds(first[0], first[2])
    with (pytest.raises(sp.BarrierNotCompleteError) as info,
          sp.consistent_read(spark, tables, barrier=9_000, client=client, catalog=catalog)):
        pass
    assert sorted(info.value.tables) == sorted(tables)
