"""The topology and a table's neighbourhood (docs/contract.md#lineage)."""

from __future__ import annotations

import httpx

from metaservice.lineage.schemas import LineageOut
from tests.metaservice.jobs.test_jobs import plan


def test_lineage_shows_running_jobs_only(client: httpx.Client) -> None:
    plan(client, "a", ["lake.db.t1"], ["lake.db.t2"])
    plan(client, "b", ["lake.db.t2"], ["lake.db.t3"])
    plan(client, "planned", ["lake.db.t3"], ["lake.db.t4"])
    client.post("/jobs/a/start")
    client.post("/jobs/b/start")
    lineage = client.get("/lineage").json()
    assert [j["job"] for j in lineage["jobs"]] == ["a", "b"]
    assert [t["table"] for t in lineage["tables"]] == ["lake.db.t1", "lake.db.t2", "lake.db.t3"]
    assert lineage["edges"] == [
        {"source": "lake.db.t1", "job": "a", "sink": "lake.db.t2"},
        {"source": "lake.db.t2", "job": "b", "sink": "lake.db.t3"},
    ]
    assert {t["table"]: t["writer_job"] for t in lineage["tables"]}["lake.db.t3"] == "b"


def test_table_lineage_by_direction_and_depth(client: httpx.Client) -> None:
    for i in range(4):
        plan(client, f"j{i}", [f"lake.db.t{i}"], [f"lake.db.t{i + 1}"])
        client.post(f"/jobs/j{i}/start")
    up = client.get("/lineage/lake/db/t3?direction=upstream").json()
    assert {t["table"]: t["distance"] for t in up["tables"]} == {
        "lake.db.t0": 3, "lake.db.t1": 2, "lake.db.t2": 1, "lake.db.t3": 0}
    down = client.get("/lineage/lake/db/t1?direction=downstream&depth=2").json()
    assert [t["table"] for t in down["tables"]] == ["lake.db.t1", "lake.db.t2", "lake.db.t3"]
    assert [j["job"] for j in down["jobs"]] == ["j1", "j2"]
    both = client.get("/lineage/lake/db/t2?depth=1").json()
    assert [t["table"] for t in both["tables"]] == ["lake.db.t1", "lake.db.t2", "lake.db.t3"]
    assert client.get("/lineage/lake/db/t2?direction=sideways").status_code == 422
    assert client.get("/lineage/lake/db/t2?depth=0").status_code == 422


def test_the_lineage_answer_matches_its_documented_model(client: httpx.Client) -> None:
    """``/lineage`` is serialised without FastAPI's response-model validation."""
    plan(client, "a", ["lake.db.t1"], ["lake.db.t2"])
    plan(client, "b", ["lake.db.t2"], ["lake.db.t3", "lake.db.t4"])
    client.post("/jobs/a/start")
    client.post("/jobs/b/start")
    client.post("/tables/lake/db/t1/barriers", json={"snapshot_id": 1, "barrier": 10})
    answer = client.get("/lineage")
    assert answer.status_code == 200, answer.text
    LineageOut.model_validate(answer.json(), strict=True)
