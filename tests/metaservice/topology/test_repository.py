"""repositories/topology.py: the graph loaded from stored edges is the in-memory graph of the
same edges, and the topology version orders changes and caches."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import update

from metaservice.core.graph import JobEdges, Topology
from metaservice.db.models import JobRow, JobTableRow, TableRow
from metaservice.db.session import Database
from metaservice.repositories import topology as topology_repo


def _store_random_jobs(database: Database, seed: int) -> list[JobEdges]:
    """Random jobs (planned, running, terminated) with random source and sink edges; returns
    the running jobs that have an edge, as in-memory ``JobEdges``."""
    rng = random.Random(seed)
    tables = [f"c{rng.randrange(2)}.d.t{i}" for i in range(rng.randrange(5, 30))]
    running: list[JobEdges] = []
    with database.transaction(write=True) as session:
        rows = {}
        for qualified in tables:
            catalog, db, name = qualified.split(".")
            rows[qualified] = TableRow(catalog=catalog, database=db, name=name, created_at=0)
        session.add_all(rows.values())
        session.flush()
        for j in range(rng.randrange(1, 25)):
            state = rng.choice(["planned", "running", "running", "terminated"])
            session.add(JobRow(name=f"job{j}", state=state, run=1, registered_at=0,
                               updated_at=0))
            session.flush()
            sources = set(rng.sample(tables, rng.randrange(0, 4)))
            sinks = set(rng.sample(tables, rng.randrange(0, 3)))  # may overlap: a self-loop
            session.add_all(JobTableRow(job_name=f"job{j}", table_id=rows[t].id, role=role)
                            for role, ts in (("source", sources), ("sink", sinks)) for t in ts)
            if state == "running" and (sources or sinks):
                running.append(JobEdges(f"job{j}", frozenset(sources), frozenset(sinks)))
    return running


@pytest.mark.parametrize("seed", range(8))
def test_stored_topology_equals_the_in_memory_graph(database: Database, seed: int) -> None:
    """Over random edges, the loaded topology has the running jobs' edges only, and the same
    tables, edges, components, cycle verdict and neighbourhoods as Topology(those edges)."""
    running = _store_random_jobs(database, seed)
    expected = Topology(running)
    with database.transaction(write=False) as session:
        loaded = topology_repo.load_running_topology(session)
    assert loaded.jobs == expected.jobs
    assert loaded.tables == expected.tables
    assert set(loaded.edges) == set(expected.edges)
    assert (loaded.find_cycle() is None) == (expected.find_cycle() is None)
    for table in sorted(expected.tables):
        assert loaded.component(table) == expected.component(table)
        assert loaded.writers_of(table) == expected.writers_of(table)
        for walk in ("upstream", "downstream"):
            for depth in (1, None):
                got, want = (getattr(t, walk)(table, depth) for t in (loaded, expected))
                assert (got.tables, got.jobs, got.edges) == (want.tables, want.jobs, want.edges)


def test_a_running_job_without_edges_is_not_in_the_topology(database: Database) -> None:
    """Only edges make the topology: a running job with none is absent from its jobs."""
    with database.transaction(write=True) as session:
        session.add(JobRow(name="lonely", state="running", run=1, registered_at=0, updated_at=0))
    with database.transaction(write=False) as session:
        assert topology_repo.load_running_topology(session).jobs == {}


def test_lock_topology_bumps_the_version(database: Database) -> None:
    """Each topology lock returns the next version, which topology_version then reads."""
    with database.transaction(write=False) as session:
        assert topology_repo.topology_version(session) == 0
    for expected in (1, 2, 3):
        with database.transaction(write=True) as session:
            assert topology_repo.lock_topology(session) == expected
        with database.transaction(write=False) as session:
            assert topology_repo.topology_version(session) == expected


def test_the_cache_reloads_only_when_the_version_changes(database: Database) -> None:
    """A change made without the topology lock stays unseen by the cache; once the version
    moves, the cache loads the running topology again."""
    running = _store_random_jobs(database, 99)
    cache = topology_repo.TopologyCache()
    with database.transaction(write=False) as session:
        first = cache.get(session)
        assert first.jobs == Topology(running).jobs
    with database.transaction(write=True) as session:
        session.execute(update(JobRow).values(state="terminated"))
    with database.transaction(write=False) as session:
        assert cache.get(session) is first
    with database.transaction(write=True) as session:
        version = topology_repo.lock_topology(session)
    with database.transaction(write=False) as session:
        assert cache.get(session, version).jobs == {}
        assert cache.get(session) is cache.get(session, version)
