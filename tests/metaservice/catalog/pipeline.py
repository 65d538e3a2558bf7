"""A pipeline with fan-out built through the catalog alone: a root table ``db.orders`` and two
sibling jobs ``a`` and ``b`` that each copy, at every barrier they process, the orders they were
handed into their own table (``db.a``, ``db.b``).

Its invariant: read at one barrier, the three tables hold the same order ids. Reading the head
while the siblings run at different paces breaks it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import httpx
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

from metaservice.clock import ManualClock
from tests.metaservice.jobs.test_jobs import plan

if TYPE_CHECKING:
    from tests.engines.spark35.rig import SparkDriver

T = TypeVar("T")

SCHEMA = pa.schema([pa.field("id", pa.int64())])
TABLES = ("orders", "a", "b")
JOBS = ("a", "b")


class FanOut:
    def __init__(self, catalog: RestCatalog, client: httpx.Client, clock: ManualClock) -> None:
        self.catalog, self.client, self.clock = catalog, client, clock
        catalog.create_namespace("db")
        self.tables = {name: catalog.create_table(f"db.{name}", schema=SCHEMA)
                       for name in TABLES}
        for job in JOBS:
            plan(client, job, ["lake.db.orders"], [f"lake.db.{job}"])
        self.started: set[str] = set()
        self.next_id = 0

    def ingest(self, count: int = 1) -> int:
        """Append ``count`` new orders completing a new barrier; answers the barrier."""
        self.clock.advance(10)
        barrier = self.clock.now_ms()
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        self.tables["orders"].append(pa.table({"id": ids}, schema=SCHEMA),
                                     snapshot_properties={"metaservice.barrier": str(barrier)})
        return barrier

    def step(self, job: str) -> int | None:
        """One barrier of ``job``, committed through the catalog with its barrier; None when
        the job has to wait."""
        if job in self.started:
            answer = self.client.post(f"/jobs/{job}/barriers/next", json={})
        else:
            answer = self.client.post(f"/jobs/{job}/start", json={})
        assert answer.status_code == 200, answer.text
        step = answer.json()
        if step["action"] != "process":
            return None
        self.started.add(job)
        orders = self.catalog.load_table("db.orders").scan(
            snapshot_id=step["snapshots"]["lake.db.orders"]).to_arrow()
        self.tables[job].overwrite(
            orders, snapshot_properties={"metaservice.job": job,
                                         "metaservice.barrier": str(step["barrier"])})
        return int(step["barrier"])


def ids(catalog: RestCatalog, table: str) -> list[int]:
    return sorted(catalog.load_table(table).scan().to_arrow()["id"].to_pylist())


def consistent(catalog: RestCatalog) -> bool:
    """The pipeline's invariant, read through ``catalog`` (a read session or the head)."""
    return ids(catalog, "db.orders") == ids(catalog, "db.a") == ids(catalog, "db.b")


def read_while_running(pipeline: FanOut, read: Callable[[int], T], rounds: int) -> list[T]:
    """``read(round)`` for each of ``rounds`` rounds while a thread runs the pipeline:
    ingestion and the two siblings, b at a quarter of a's pace, so that most of the time the
    head holds orders a has not processed, or a's output b has not caught up with. Answers the
    reads; a failure of the pipeline's thread fails the call."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            for turn in itertools.count(1):
                if stop.wait(0.2):
                    return
                pipeline.ingest(1)
                pipeline.step("a")
                if turn % 4 == 0:
                    pipeline.step("b")
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    writer = threading.Thread(target=run)
    writer.start()
    try:
        answers = [read(round_) for round_ in range(rounds)]
    finally:
        stop.set()
        writer.join()
    assert not failures, failures
    return answers


def broken_ids(spark: SparkDriver, catalog: str) -> tuple[int, int]:
    """One Spark SQL query joining the fan-out's three tables through the Spark catalog
    ``catalog``: the orders read, and the ids missing from one of the three tables (the
    pipeline's invariant is that there are none)."""
    [[orders, broken]] = spark.sql(
        f"SELECT count(o.id), count_if(o.id IS NULL OR a.id IS NULL OR b.id IS NULL) "
        f"FROM {catalog}.db.orders o FULL JOIN {catalog}.db.a a ON o.id = a.id "
        f"FULL JOIN {catalog}.db.b b ON coalesce(o.id, a.id) = b.id")
    return orders, broken


def strong_sessions_hold_while_the_head_mixes(spark: SparkDriver, lake: str, catalog: RestCatalog,
                                              client: httpx.Client, clock: ManualClock,
                                              server_url: str, rounds: int) -> None:
    """The fan-out runs (two barriers in, both siblings stepped) while Spark reads it ``rounds``
    times, each round through a new catalog of the consistent warehouse ``lake@strong`` (a
    read session's cut is fixed at its first load) and through the head ``lake``: no session's
    join breaks the invariant and new sessions follow the pipeline, the head mixes barriers,
    and a write through a session is refused."""
    import pytest

    from tests.engines.spark35.rig import SparkError

    pipeline = FanOut(catalog, client, clock)
    pipeline.ingest(2)
    pipeline.step("a"), pipeline.step("b")

    def read(round_: int) -> tuple[tuple[int, int], tuple[int, int]]:
        session = f"{lake}_strong{round_}"
        spark.catalog(session, type="rest", uri=f"{server_url}/iceberg", warehouse="lake@strong")
        return broken_ids(spark, session), broken_ids(spark, lake)

    reads = read_while_running(pipeline, read, rounds=rounds)
    strong, head = [r[0] for r in reads], [r[1] for r in reads]
    print(f"strong read sessions (orders read, broken ids): {strong}; head: {head}")
    assert all(broken == 0 for _, broken in strong), strong
    assert len({orders for orders, _ in strong}) > 1, strong  # new sessions follow the pipeline
    assert sum(broken > 0 for _, broken in head) > 0, head  # the head mixes barriers
    with pytest.raises(SparkError, match="read-only session"):
        spark.sql(f"INSERT INTO {lake}_strong0.db.orders VALUES (99)")
