"""Server-side scan planning (docs/contract.md#scan-planning) through pyiceberg's own REST client
and plain HTTP, on both backends: planned scans read the right rows, at a read session's cut,
pruned by their filters; planned snapshots are protected while the plan lives; plans are capped
per principal, live in the database (any server process answers them) and refuse bad input in
the specification's error shape."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import EqualTo, GreaterThanOrEqual
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from metaservice.app import create_app
from metaservice.auth.policy import Role
from metaservice.auth.service import create_token
from metaservice.clock import ManualClock
from metaservice.db.session import Database
from metaservice.settings import Settings
from tests.conftest import ServerThread
from tests.metaservice.catalog.conftest import rest_catalog, send_together
from tests.metaservice.catalog.pipeline import FanOut, consistent, ids

TABLE = "/iceberg/v1/namespaces/db/tables/events"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "kind", StringType(), required=False))
BY_KIND = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "kind"))
PLANS = 20  # each principal's live plans in these tests
ARROW = pa.schema([pa.field("id", pa.int64()), pa.field("kind", pa.string())])


@pytest.fixture
def settings(database_url: str, warehouse: Path) -> Settings:
    return Settings(database_url=database_url, warehouse=str(warehouse), max_scan_plans=PLANS,
                    scan_plan_seconds=60)


def planning(catalog: RestCatalog) -> RestCatalog:
    """The same catalog, with pyiceberg planning its scans on the server."""
    return rest_catalog(catalog.properties["uri"].removesuffix("/iceberg"),
                        **{"scan-planning-mode": "server",
                           "warehouse": catalog.properties.get("warehouse", "lake")})


def events(catalog: RestCatalog) -> list[int]:
    """``db.events``, partitioned by kind, filled by three appends; answers their snapshots."""
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", schema=SCHEMA, partition_spec=BY_KIND)
    snapshots = []
    for batch in ({"id": [1, 2, 3], "kind": ["a", "a", "b"]},
                  {"id": [10, 20], "kind": ["b", "c"]},
                  {"id": [30], "kind": ["a"]}):
        table.append(pa.table(batch, schema=ARROW))
        snapshots.append(table.refresh().metadata.current_snapshot_id)
    return snapshots


def plan(client: httpx.Client, body: dict[str, Any], path: str = TABLE) -> dict[str, Any]:
    answer = client.post(f"{path}/plan", json=body)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    assert result["status"] == "completed" and result["plan-id"]
    return result


def files(result: dict[str, Any]) -> list[str]:
    return sorted(task["data-file"]["file-path"] for task in result["file-scan-tasks"])


def assert_iceberg_error(answer: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert error["type"] == kind and error["code"] == status and error["message"], error
    return error


def test_pyiceberg_reads_a_server_planned_scan(catalog: RestCatalog,
                                               client: httpx.Client) -> None:
    events(catalog)
    served = planning(catalog)
    assert served.supports_server_side_planning()
    table = served.load_table("db.events")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 10, 20, 30]
    kept = table.scan(row_filter=GreaterThanOrEqual("id", 10), selected_fields=("id",))
    assert sorted(kept.to_arrow()["id"].to_pylist()) == [10, 20, 30]
    # Planned by the server: each scan is a plan, whose lease names the table.
    holders = [lease["holder"] for lease in client.get("/leases").json()["leases"]]
    assert holders.count("scan plan of lake.db.events") >= 2


def test_a_filter_prunes_files_and_answers_the_residual(catalog: RestCatalog,
                                                        client: httpx.Client) -> None:
    events(catalog)
    everything = plan(client, {})
    assert len(everything["file-scan-tasks"]) == 5  # a, b | b, c | a
    only_b = plan(client, {"filter": {"type": "eq", "term": "kind", "value": "b"}})
    assert len(only_b["file-scan-tasks"]) == 2
    assert all(task["data-file"]["partition"] == ["b"] for task in only_b["file-scan-tasks"])
    # Metrics prune too: only the b file of the second append holds an id of 10 or more.
    big_b = plan(client, {"filter": {"type": "and",
                                     "left": {"type": "eq", "term": "kind", "value": "b"},
                                     "right": {"type": "gt-eq", "term": "id", "value": 10}},
                          "stats-fields": ["id"]})
    (task,) = big_b["file-scan-tasks"]
    assert task["data-file"]["record-count"] == 1
    assert task["residual-filter"] == {"type": "gt-eq", "term": "id", "value": 10}
    assert task["data-file"]["lower-bounds"] == {"keys": [1], "values": [10]}
    assert "lower-bounds" not in everything["file-scan-tasks"][0]["data-file"]  # not asked


def test_a_plan_at_a_snapshot_and_an_incremental_plan_of_appends(catalog: RestCatalog,
                                                                 client: httpx.Client) -> None:
    first, second, third = events(catalog)
    assert len(plan(client, {"snapshot-id": first})["file-scan-tasks"]) == 2
    appended = plan(client, {"start-snapshot-id": first, "end-snapshot-id": third})
    assert sorted(t["data-file"]["record-count"] for t in appended["file-scan-tasks"]) == [
        1, 1, 1]
    assert len(plan(client, {"start-snapshot-id": second, "end-snapshot-id": third})[
        "file-scan-tasks"]) == 1


def test_bad_input_is_400_in_the_specifications_error_shape(catalog: RestCatalog,
                                                            client: httpx.Client) -> None:
    first, _, third = events(catalog)
    for body in ({"snapshot-id": first, "start-snapshot-id": first, "end-snapshot-id": third},
                 {"start-snapshot-id": first},
                 {"snapshot-id": 12345},
                 {"start-snapshot-id": third, "end-snapshot-id": first},
                 {"select": ["no_such_column"]},
                 {"stats-fields": ["nope"]},
                 {"filter": {"type": "eq", "term": "no_such_column", "value": 1}},
                 {"filter": {"type": "no-such-predicate"}},
                 {"filter": {"type": "eq", "term": "ID", "value": 1}, "case-sensitive": True},
                 {"case-sensitive": "yes"}):
        assert_iceberg_error(client.post(f"{TABLE}/plan", json=body), 400,
                             "BadRequestException")
    # Case-insensitive, the same field binds.
    plan(client, {"filter": {"type": "eq", "term": "ID", "value": 1}, "case-sensitive": False})
    assert_iceberg_error(client.post("/iceberg/v1/namespaces/db/tables/nope/plan", json={}),
                         404, "NoSuchTableException")


def test_big_plans_come_as_plan_tasks(database: Database, database_url: str, warehouse: Path,
                                      clock: ManualClock) -> None:
    settings = Settings(database_url=database_url, warehouse=str(warehouse),
                        scan_plan_files_per_task=2)
    with ServerThread(create_app(settings, clock=clock, database=database)) as server, \
            httpx.Client(base_url=server.url, timeout=30) as http:
        catalog = rest_catalog(server.url)
        events(catalog)
        result = plan(http, {})
        assert "file-scan-tasks" not in result and len(result["plan-tasks"]) == 3
        fetched = [http.post(f"{TABLE}/tasks", json={"plan-task": token})
                   for token in result["plan-tasks"]]
        assert [len(answer.json()["file-scan-tasks"]) for answer in fetched] == [2, 2, 1]
        again = http.get(f"{TABLE}/plan/{result['plan-id']}")
        assert again.json() == {"status": "completed", "plan-tasks": result["plan-tasks"]}
        for unknown in (result["plan-tasks"][0] + "0", f"{result['plan-id']}:3", "nothing"):
            assert_iceberg_error(http.post(f"{TABLE}/tasks", json={"plan-task": unknown}), 404,
                                 "NoSuchPlanTaskException")
        # pyiceberg fetches the plan tasks itself.
        table = planning(catalog).load_table("db.events")
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 10, 20, 30]


def expire(client: httpx.Client, snapshot_id: int) -> dict[str, Any]:
    answer = client.post("/tables/lake/db/events/expirations", json={"snapshot_ids": [snapshot_id]})
    assert answer.status_code == 201, answer.text
    return answer.json()  # type: ignore[no-any-return]


def test_a_planned_snapshot_is_protected_until_the_plan_is_cancelled(
        catalog: RestCatalog, client: httpx.Client) -> None:
    first, _, _ = events(catalog)
    held = plan(client, {"snapshot-id": first})
    (refused,) = expire(client, first)["refused"]
    assert f"lease:{held['plan-id']}" in refused["reasons"]
    assert client.delete(f"{TABLE}/plan/{held['plan-id']}").status_code == 204
    assert expire(client, first)["approved"] == [first]
    assert_iceberg_error(client.get(f"{TABLE}/plan/{held['plan-id']}"), 404,
                         "NoSuchPlanIdException")
    assert_iceberg_error(client.delete(f"{TABLE}/plan/{held['plan-id']}"), 404,
                         "NoSuchPlanIdException")
    # An approved snapshot is never planned again.
    gone = client.post(f"{TABLE}/plan", json={"snapshot-id": first})
    assert gone.status_code == 410, gone.text


def test_a_planned_snapshot_is_protected_until_the_plan_expires(
        catalog: RestCatalog, client: httpx.Client, clock: ManualClock) -> None:
    first, _, _ = events(catalog)
    held = plan(client, {"snapshot-id": first})
    clock.advance(60_000 - 1)
    assert client.get(f"{TABLE}/plan/{held['plan-id']}").status_code == 200
    assert expire(client, first)["refused"]
    clock.advance(1)
    assert_iceberg_error(client.get(f"{TABLE}/plan/{held['plan-id']}"), 404,
                         "NoSuchPlanIdException")
    assert expire(client, first)["approved"] == [first]


def test_a_principal_holds_a_bounded_number_of_plans(catalog: RestCatalog,
                                                     client: httpx.Client) -> None:
    events(catalog)
    plans = [plan(client, {})["plan-id"] for _ in range(PLANS)]
    error = assert_iceberg_error(client.post(f"{TABLE}/plan", json={}), 429,
                                 "TooManyRequestsException")
    assert error["message"].startswith("metaservice too_many_scan_plans:")
    assert "DELETE /iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}" \
        in error["message"]
    assert client.delete(f"{TABLE}/plan/{plans[0]}").status_code == 204
    plan(client, {})
    # Plans are not leases: the lease cap is untouched.
    assert client.post("/leases", json={"holder": "x", "ttl_seconds": 10,
                                        "snapshots": []}).status_code != 429


def test_another_server_process_answers_and_cancels_a_plan(
        catalog: RestCatalog, client: httpx.Client, database: Database, settings: Settings,
        clock: ManualClock) -> None:
    first, _, _ = events(catalog)
    result = plan(client, {"snapshot-id": first})
    other = Settings(**{**settings.model_dump(), "metadata_cache_bytes": 0})
    with ServerThread(create_app(other, clock=clock, database=database)) as server, \
            httpx.Client(base_url=server.url, timeout=30) as http:
        fetched = http.get(f"{TABLE}/plan/{result['plan-id']}")
        assert fetched.status_code == 200, fetched.text
        assert fetched.json()["status"] == "completed"
        (token,) = fetched.json()["plan-tasks"]
        tasks = http.post(f"{TABLE}/tasks", json={"plan-task": token})
        assert files(tasks.json()) == files(result)
        assert http.delete(f"{TABLE}/plan/{result['plan-id']}").status_code == 204
    assert_iceberg_error(client.get(f"{TABLE}/plan/{result['plan-id']}"), 404,
                         "NoSuchPlanIdException")
    assert expire(client, first)["approved"] == [first]


def plan_leases(client: httpx.Client) -> list[str]:
    """The ids of the live leases of plans."""
    return [lease["lease_id"] for lease in client.get("/leases").json()["leases"]
            if lease["holder"].startswith("scan plan of ")]


def test_a_plan_retried_with_its_key_answers_the_first_plan(catalog: RestCatalog,
                                                           client: httpx.Client) -> None:
    """The same plan request with the same ``Idempotency-Key`` is answered the first plan: the
    same plan-id and files, no second lease, nothing more counted against the cap (a retry
    once the cap is reached is still answered)."""
    first, _, _ = events(catalog)
    key = {"Idempotency-Key": str(uuid.uuid4())}
    body = {"snapshot-id": first, "filter": {"type": "eq", "term": "kind", "value": "a"}}
    planned = client.post(f"{TABLE}/plan", json=body, headers=key)
    assert planned.status_code == 200, planned.text
    again = client.post(f"{TABLE}/plan", json=body, headers=key)
    assert again.status_code == 200, again.text
    assert again.json() == planned.json()
    assert plan_leases(client) == [planned.json()["plan-id"]]
    others = [plan(client, {})["plan-id"] for _ in range(PLANS - 1)]  # the cap is reached
    assert_iceberg_error(client.post(f"{TABLE}/plan", json={}), 429, "TooManyRequestsException")
    still = client.post(f"{TABLE}/plan", json=body, headers=key)
    assert still.status_code == 200, still.text
    assert still.json()["plan-id"] == planned.json()["plan-id"]
    assert sorted(plan_leases(client)) == sorted([planned.json()["plan-id"], *others])
    # The key with another body, or for another table, is another request: 422, no plan.
    for path, other in ((TABLE, {"snapshot-id": first}),
                        ("/iceberg/v1/namespaces/db/tables/other", body)):
        error = assert_iceberg_error(client.post(f"{path}/plan", json=other, headers=key),
                                     422, "UnprocessableEntityException")
        assert "idempotency_key_reused" in error["message"]
    assert len(plan_leases(client)) == PLANS


def test_a_plan_refused_by_the_cap_is_not_kept_for_its_key(catalog: RestCatalog,
                                                          client: httpx.Client) -> None:
    """429 is not final: once a plan is cancelled, the same keyed request plans."""
    events(catalog)
    plans = [plan(client, {})["plan-id"] for _ in range(PLANS)]
    key = {"Idempotency-Key": str(uuid.uuid4())}
    assert_iceberg_error(client.post(f"{TABLE}/plan", json={}, headers=key), 429,
                         "TooManyRequestsException")
    assert client.delete(f"{TABLE}/plan/{plans[0]}").status_code == 204
    planned = client.post(f"{TABLE}/plan", json={}, headers=key)
    assert planned.status_code == 200, planned.text
    assert planned.json()["plan-id"] not in plans


def test_two_plans_racing_with_one_key_make_one_plan(catalog: RestCatalog,
                                                     client: httpx.Client,
                                                     server: ServerThread) -> None:
    events(catalog)
    for _ in range(3):
        key = {"Idempotency-Key": str(uuid.uuid4())}
        answers = send_together(server.url, [(f"{TABLE}/plan", {})] * 2, key)
        assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
        assert answers[0].json()["plan-id"] == answers[1].json()["plan-id"]
    assert len(plan_leases(client)) == 3


def test_a_cancel_retried_with_its_key_is_answered_again(catalog: RestCatalog,
                                                        client: httpx.Client) -> None:
    first, _, _ = events(catalog)
    held = plan(client, {"snapshot-id": first})["plan-id"]
    key = {"Idempotency-Key": str(uuid.uuid4())}
    assert client.delete(f"{TABLE}/plan/{held}", headers=key).status_code == 204
    assert client.delete(f"{TABLE}/plan/{held}", headers=key).status_code == 204  # not a 404
    assert_iceberg_error(client.delete(f"{TABLE}/plan/{held}"), 404, "NoSuchPlanIdException")
    assert expire(client, first)["approved"] == [first]
    # The key for another plan is another request; a cancel's final refusal is kept.
    other = plan(client, {})["plan-id"]
    assert_iceberg_error(client.delete(f"{TABLE}/plan/{other}", headers=key), 422,
                         "UnprocessableEntityException")
    assert plan_leases(client) == [other]
    key = {"Idempotency-Key": str(uuid.uuid4())}
    assert_iceberg_error(client.delete(f"{TABLE}/plan/{held}", headers=key), 404,
                         "NoSuchPlanIdException")
    assert_iceberg_error(client.delete(f"{TABLE}/plan/{held}", headers=key), 404,
                         "NoSuchPlanIdException")


def test_a_plan_and_its_cancel_in_a_read_session_honour_their_keys(
        catalog: RestCatalog, client: httpx.Client) -> None:
    events(catalog)
    prefix = client.get("/iceberg/v1/config",
                        params={"warehouse": "lake@strong"}).json()["overrides"]["prefix"]
    session = f"/iceberg/v1/{prefix}/namespaces/db/tables/events"
    key = {"Idempotency-Key": str(uuid.uuid4())}
    planned = client.post(f"{session}/plan", json={}, headers=key)
    assert planned.status_code == 200, planned.text
    assert client.post(f"{session}/plan", json={}, headers=key).json() == planned.json()
    assert_iceberg_error(client.post(f"{TABLE}/plan", json={}, headers=key), 422,
                         "UnprocessableEntityException")  # the head is another path
    plan_id = planned.json()["plan-id"]
    assert plan_leases(client) == [plan_id]
    key = {"Idempotency-Key": str(uuid.uuid4())}
    assert client.delete(f"{session}/plan/{plan_id}", headers=key).status_code == 204
    assert client.delete(f"{session}/plan/{plan_id}", headers=key).status_code == 204
    assert plan_leases(client) == []


@pytest.fixture
def pipeline(catalog: RestCatalog, client: httpx.Client, clock: ManualClock) -> FanOut:
    return FanOut(catalog, client, clock)


def test_plans_in_a_strong_session_name_files_of_one_barrier(
        pipeline: FanOut, catalog: RestCatalog, client: httpx.Client,
        server: ServerThread) -> None:
    first = pipeline.ingest(3)
    assert pipeline.step("a") == first and pipeline.step("b") == first
    second = pipeline.ingest(2)
    assert pipeline.step("a") == second  # b lags: the head mixes two barriers
    assert not consistent(catalog)

    strong = rest_catalog(server.url, warehouse="lake@strong", **{"scan-planning-mode": "server"})
    assert strong.properties["prefix"].startswith("session-")
    assert consistent(strong)  # every scan planned by the server, at the session's cut
    assert ids(strong, "db.a") == [0, 1, 2]
    session = f"/iceberg/v1/{strong.properties['prefix']}/namespaces/db/tables"
    at_cut = plan(client, {}, f"{session}/a")
    head = plan(client, {}, "/iceberg/v1/namespaces/db/tables/a")
    assert files(at_cut) != files(head)
    cut_snapshot = strong.load_table("db.a").metadata.current_snapshot_id
    assert files(plan(client, {"snapshot-id": cut_snapshot},
                      "/iceberg/v1/namespaces/db/tables/a")) == files(at_cut)
    # A snapshot after the cut is not the session's to plan.
    newer = catalog.load_table("db.a").metadata.current_snapshot_id
    assert_iceberg_error(client.post(f"{session}/a/plan", json={"snapshot-id": newer}), 400,
                         "BadRequestException")
    # The session's plans are fetched under its prefix only.
    assert client.get(f"{session}/a/plan/{at_cut['plan-id']}").status_code == 200
    assert_iceberg_error(client.get(
        f"/iceberg/v1/namespaces/db/tables/a/plan/{at_cut['plan-id']}"), 404,
        "NoSuchPlanIdException")


@pytest.fixture
def secured(database: Database, database_url: str, warehouse: Path,
            clock: ManualClock) -> Iterator[tuple[str, dict[str, str]]]:
    settings = Settings(database_url=database_url, auth="required", warehouse=str(warehouse))
    with database.transaction(write=True) as session:
        tokens = {name: create_token(session, name, role, clock.now_ms()).token
                  for name, role in (("w", Role.writer), ("r1", Role.reader),
                                     ("r2", Role.reader))}
    with ServerThread(create_app(settings, clock=clock, database=database)) as server:
        yield server.url, tokens


def test_planning_is_authorized_as_a_load(secured: tuple[str, dict[str, str]]) -> None:
    url, tokens = secured
    events(rest_catalog(url, token=tokens["w"]))

    def http(who: str | None) -> httpx.Client:
        headers = {} if who is None else {"Authorization": f"Bearer {tokens[who]}"}
        return httpx.Client(base_url=url, timeout=30, headers=headers)

    with http(None) as anonymous, http("r1") as r1, http("r2") as r2:
        assert anonymous.post(f"{TABLE}/plan", json={}).status_code == 401
        mine = plan(r1, {})
        # Another reader does not see r1's plan, nor fetch its tasks, nor cancel it.
        assert_iceberg_error(r2.get(f"{TABLE}/plan/{mine['plan-id']}"), 404,
                             "NoSuchPlanIdException")
        assert_iceberg_error(r2.delete(f"{TABLE}/plan/{mine['plan-id']}"), 404,
                             "NoSuchPlanIdException")
        assert r1.get(f"{TABLE}/plan/{mine['plan-id']}").status_code == 200
        # A read session is its owner's: r2 plans nothing in r1's.
        config = r1.get("/iceberg/v1/config", params={"warehouse": "lake@strong"}).json()
        prefix = config["overrides"]["prefix"]
        answer = r2.post(f"/iceberg/v1/{prefix}/namespaces/db/tables/events/plan", json={})
        assert answer.status_code == 404, answer.text
        # pyiceberg with a reader's token plans and reads.
        reader = rest_catalog(url, token=tokens["r1"], **{"scan-planning-mode": "server"})
        assert sorted(reader.load_table("db.events").scan(
            row_filter=EqualTo("kind", "a")).to_arrow()["id"].to_pylist()) == [1, 2, 30]


def test_a_table_whose_manifests_are_gone_fails_planning_and_keeps_no_plan(
        catalog: RestCatalog, client: httpx.Client) -> None:
    events(catalog)
    manifest_list = catalog.load_table("db.events").current_snapshot().manifest_list
    Path(manifest_list.removeprefix("file://")).unlink()
    answer = client.post(f"{TABLE}/plan", json={})
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["status"] == "failed" and "plan-id" not in result
    assert result["error"]["code"] == 404 and "is gone" in result["error"]["message"]
    assert not plan_leases(client)
    # Failed planning is the outcome of its key: the same answer again, still no plan.
    key = {"Idempotency-Key": str(uuid.uuid4())}
    keyed = client.post(f"{TABLE}/plan", json={}, headers=key)
    assert keyed.json()["status"] == "failed"
    again = client.post(f"{TABLE}/plan", json={}, headers=key)
    assert (again.status_code, again.json()) == (200, keyed.json())
    assert not plan_leases(client)


@pytest.mark.spark_jvm
@pytest.mark.backends("postgresql")
def test_position_deletes_written_by_spark_are_planned_with_their_data_files(
        tmp_path: Path, catalog: RestCatalog, client: httpx.Client,
        server: ServerThread) -> None:
    """Iceberg's Spark runtime deletes a row merge-on-read (a position delete file); the
    server's plan names the same data and delete files as pyiceberg's own planning, and a
    planned read leaves the deleted row out."""
    from tests.engines.spark35.rig import SparkDriver

    spark = SparkDriver(tmp_path / "driver.log")
    try:
        lake = spark.head_catalog(server.url)
        spark.sql(f"CREATE NAMESPACE {lake}.db")
        spark.sql(f"CREATE TABLE {lake}.db.deletes (id bigint, data bigint) USING iceberg "
                  "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')")
        spark.sql(f"INSERT INTO {lake}.db.deletes VALUES (1, 10), (2, 20), (3, 30)")
        spark.sql(f"DELETE FROM {lake}.db.deletes WHERE id = 2")
    finally:
        spark.close()
    local = list(catalog.load_table("db.deletes").scan().plan_files())
    assert any(task.delete_files for task in local)  # Spark wrote a position delete
    result = plan(client, {}, "/iceberg/v1/namespaces/db/tables/deletes")
    (deleted,) = result["delete-files"]
    assert deleted["content"] == "position-deletes"
    assert files(result) == sorted(task.file.file_path for task in local)
    assert {deleted["file-path"]} == {d.file_path for task in local for d in task.delete_files}
    assert all(task["delete-file-references"] == [0] for task in result["file-scan-tasks"]
               if task["data-file"]["file-path"] in {
                   t.file.file_path for t in local if t.delete_files})
    table = planning(catalog).load_table("db.deletes")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 3]


def test_a_plan_ends_with_its_table(catalog: RestCatalog, client: httpx.Client) -> None:
    """A plan of a dropped table is not a plan of a later table of the same name."""
    events(catalog)
    held = plan(client, {})
    catalog.drop_table("db.events")
    assert_iceberg_error(client.get(f"{TABLE}/plan/{held['plan-id']}"), 404,
                         "NoSuchTableException")
    catalog.create_table("db.events", schema=SCHEMA)
    assert_iceberg_error(client.get(f"{TABLE}/plan/{held['plan-id']}"), 404,
                         "NoSuchPlanIdException")
    assert_iceberg_error(client.post(f"{TABLE}/tasks", json={
        "plan-task": f"{held['plan-id']}:0"}), 404, "NoSuchPlanTaskException")


def test_values_are_written_as_the_specification_encodes_them() -> None:
    """Partition values and bounds, from pyiceberg's internal representation (days,
    microseconds, nanoseconds, bytes) to the specification's ``PrimitiveTypeValue`` examples."""
    from decimal import Decimal
    from uuid import UUID

    from pyiceberg.types import (
        BinaryType,
        DateType,
        DecimalType,
        FixedType,
        TimestampNanoType,
        TimestampType,
        TimestamptzNanoType,
        TimestamptzType,
        TimeType,
        UUIDType,
    )

    from metaservice.catalog.scan_plans.planning import value_json

    micros = 1196676930123456  # 2007-12-03T10:15:30.123456
    uuid = "eb26bdb1-a1d8-4aa6-990e-da940875492c"
    assert value_json(DateType(), 13850) == "2007-12-03"
    assert value_json(TimeType(), 81068123456) == "22:31:08.123456"
    assert value_json(TimestampType(), micros) == "2007-12-03T10:15:30.123456"
    assert value_json(TimestamptzType(), micros) == "2007-12-03T10:15:30.123456+00:00"
    assert value_json(TimestampNanoType(), micros * 1000 + 789) == "2007-12-03T10:15:30.123456789"
    assert value_json(TimestamptzNanoType(), micros * 1000 + 789) == (
        "2007-12-03T10:15:30.123456789+00:00")
    assert value_json(DecimalType(9, 4), Decimal("123.4500")) == "123.4500"
    assert value_json(UUIDType(), UUID(uuid)) == uuid
    assert value_json(UUIDType(), UUID(uuid).bytes) == uuid
    assert value_json(FixedType(3), b"xyz") == value_json(BinaryType(), b"xyz") == "78797A"
    assert value_json(LongType(), 5) == 5 and value_json(StringType(), "b") == "b"
    assert value_json(None, float("nan")) is None
