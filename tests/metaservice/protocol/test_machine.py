"""The randomized protocol model (``machine.py``) against the real server, both backends.

CI runs a fixed, derandomized set of examples. More: ``METASERVICE_MODEL_EXAMPLES`` (examples
per profile and backend) and ``METASERVICE_MODEL_STEPS`` (steps per example), and pytest's
``--hypothesis-seed=N`` for another seed. ``METASERVICE_MODEL_SURVEY=1`` fails on nothing and
only counts violations by kind, to measure a server; ``METASERVICE_MODEL_REPORT=path`` writes
the figures (steps, violations, the strong cut's trail) as JSON; ``-s`` prints them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from metaservice.clock import ManualClock
from metaservice.db.session import Database
from tests.metaservice.protocol.machine import CHAINS, FANOUT, ProtocolMachine, Record

pytestmark = pytest.mark.slow  # long randomized histories

EXAMPLES = int(os.environ.get("METASERVICE_MODEL_EXAMPLES", "0"))
STEPS = int(os.environ.get("METASERVICE_MODEL_STEPS", "0"))
SURVEY = os.environ.get("METASERVICE_MODEL_SURVEY") == "1"
REPORT = os.environ.get("METASERVICE_MODEL_REPORT")


def run(request: pytest.FixtureRequest, profile, examples: int, steps: int,  # type: ignore[no-untyped-def]
        client: httpx.Client, clock: ManualClock, database: Database) -> Record:
    record = Record()
    machine = type(f"{profile.name.title()}Machine", (ProtocolMachine,),
                   {"profile": profile, "record": record, "survey": SURVEY})
    seeded = request.config.getoption("--hypothesis-seed", None) is not None
    try:
        run_state_machine_as_test(
            lambda: machine(client, clock, database),  # type: ignore[arg-type]
            settings=settings(max_examples=EXAMPLES or examples,
                              stateful_step_count=STEPS or steps, deadline=None,
                              derandomize=not seeded, database=None,
                              suppress_health_check=list(HealthCheck)))
    finally:
        summary = {"profile": profile.name, "test": request.node.name, **record.summary()}
        print(json.dumps(summary, indent=1))
        if REPORT:
            with Path(REPORT).open("a") as out:
                out.write(json.dumps(summary) + "\n")
    return record


def test_fan_out_every_answer_is_exact(request: pytest.FixtureRequest, client: httpx.Client,
                                       clock: ManualClock, database: Database) -> None:
    """Siblings at random speeds, fan-in joins, chains, two or three roots, restarts with every
    ``from``, aborts, rollbacks, leases: every answer exact, strong cuts monotonic, the final
    drain brings every table's strong version to the final barrier."""
    # the histories are derandomized: PostgreSQL's are the first half of SQLite's, which checks
    # the store's own behaviour under them in half the time
    examples = 9 if database.dialect == "postgresql" else 18
    record = run(request, FANOUT, examples, 50, client, clock, database)
    assert record.drains > 0


def test_chains_strong_cuts_advance_and_drain(request: pytest.FixtureRequest,
                                              client: httpx.Client, clock: ManualClock,
                                              database: Database) -> None:
    """Chains only (no table read by two jobs): strong cuts never move backwards and the final
    drain brings every strong version to the final barrier."""
    record = run(request, CHAINS, 10, 40, client, clock, database)
    assert record.drains > 0
