"""A strong version that cannot be had (404 ``no_version``) says what holds the pipeline back:
the table that has not produced, its writer, and since when."""

from __future__ import annotations

import httpx

from metaservice.clock import ManualClock
from metaservice.core.cuts import TableState, tables_holding_back
from tests.metaservice.protocol.test_examples import commit, plan, post, root
from tests.metaservice.test_errors import assert_error

T0 = 1_795_000_000_000  # 2026-11-18T11:06:40Z


def test_a_job_that_never_committed_is_named_with_its_start(client: httpx.Client,
                                                             clock: ManualClock) -> None:
    """As after the README's walk-through and a batch job: r → enrich → t → daily → u; enrich
    committed once and stopped, daily has never committed. u joined the pipeline at the cut
    T0 + 1000 (r's, when enrich started) and keeps that floor when enrich leaves: t, exact
    there, is served at it; u names its writer."""
    clock.set(T0)
    plan(client, "enrich", ["r"], ["t"])
    plan(client, "daily", ["t"], ["u"])
    post(client, "/jobs/daily/start")
    root(client, "r", T0 + 1000, 1)
    assert post(client, "/jobs/enrich/start")["barrier"] == T0 + 1000
    commit(client, "enrich", "t", T0 + 1000, 11)
    post(client, "/unregister/enrich")
    clock.set(T0 + 300_000)

    assert client.get("/version/strong/lake/db/t").json()["barrier"] == T0 + 1000
    error = assert_error(client.get("/version/strong/lake/db/u"), 404, "no_version")
    assert error["message"] == (
        "no completed barrier yet for lake.db.u: lake.db.u has no barrier yet; its writer, job "
        "daily, has been running since 2026-11-18T11:06:40Z (5 min) without committing a "
        "barrier")
    assert error["details"]["tables"] == ["lake.db.u"]
    assert error["details"]["holding_back"] == [{
        "table": "lake.db.u", "latest_barrier": None, "catching_up": True,
        "catch_up_floor": T0 + 1000, "writer_job": "daily", "writer_started_at": T0}]

    post(client, "/unregister/daily")  # its edges leave the topology: t has a cut again
    assert client.get("/version/strong/lake/db/t").json()["barrier"] == T0 + 1000


def test_tables_holding_back_a_component() -> None:
    none = TableState("c.d.none", None)
    behind = TableState("c.d.behind", 20, catching_up=True, catch_up_floor=None)
    early, late = TableState("c.d.early", 10), TableState("c.d.late", 30)
    assert tables_holding_back([late, none, early, behind]) == [behind, none]
    # Every table has barriers but they share no exact one: the least latest bounds the cut.
    assert tables_holding_back([late, early, TableState("c.d.also", 10)]) == [
        TableState("c.d.also", 10), early]
    assert tables_holding_back([]) == []
