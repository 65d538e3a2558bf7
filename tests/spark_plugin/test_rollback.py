"""spark_plugin.rollback_tables: a plan from the real service carried out on real Iceberg tables
(pyiceberg SQL catalog on disk): apply (fence), roll back, complete."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

import spark_plugin as sp
from spark_plugin.rollback import RollbackNotIncrementalError, rollback_tables

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


def _append(table, value: int) -> int:  # type: ignore[no-untyped-def]
    table.append(pa.table({"id": pa.array([value], pa.int64())}, schema=SCHEMA))
    table.refresh()
    return table.metadata.current_snapshot_id


def test_rollback_tables_follows_the_plan_and_completes_it(catalog, database, client) -> None:  # type: ignore[no-untyped-def]
    src = catalog.create_table((database, "src"), schema=SCHEMA)
    dst = catalog.create_table((database, "dst"), schema=SCHEMA)
    job = f"roll-{uuid.uuid4().hex[:8]}"
    path = f"lake/{database}"
    client.request("POST", f"/register/source/{job}/{path}/src", idempotent=True)
    client.request("POST", f"/register/sink/{job}/{path}/dst", idempotent=True)
    snaps: dict[str, dict[int, int]] = {"src": {}, "dst": {}}
    for i, barrier in enumerate((1000, 2000, 3000)):
        snaps["src"][barrier] = _append(src, i)
        client.request("POST", f"/tables/{path}/src/barriers", idempotent=False,
                       json={"snapshot_id": snaps["src"][barrier], "barrier": barrier})
        position = (client.request("POST", f"/jobs/{job}/start", idempotent=True) if i == 0
                    else client.request("POST", f"/jobs/{job}/barriers/next", idempotent=True,
                                        json={"after": barrier - 1000}))
        assert position["barrier"] == barrier
        snaps["dst"][barrier] = _append(dst, 10 + i)
        client.request("POST", f"/commit/{job}/{path}/dst", idempotent=True,
                       json={"barrier": barrier, "snapshot_id": snaps["dst"][barrier]})

    plan = client.request("POST", "/rollback-plans", idempotent=False,
                          json={"table": f"lake.{database}.src", "barrier": 2000})
    assert plan["mode"] == "incremental" and plan["state"] == "planned"
    done = rollback_tables(plan, catalog, client=client)

    assert {n: (r.snapshot_id, r.action) for n, r in done.items()} == {
        f"lake.{database}.src": (snaps["src"][2000], "rolled_back"),
        f"lake.{database}.dst": (snaps["dst"][2000], "rolled_back")}
    for name, table in (("src", src), ("dst", dst)):
        table.refresh()
        assert table.metadata.current_snapshot_id == snaps[name][2000]
        assert len(table.scan().to_arrow()) == 2
    assert client.request("GET", f"/rollback-plans/{plan['id']}",
                          idempotent=True)["state"] == "completed"
    version = client.request("GET", f"/version/weak/{path}/dst", idempotent=True)
    assert (version["barrier"], version["snapshot_id"]) == (2000, snaps["dst"][2000])
    answer = client.request("POST", f"/jobs/{job}/barriers/next", idempotent=True,
                            json={"after": 3000})
    assert answer["action"] == "abort" and answer["restart_after"] == 2000
    # Carried out again (a retry after a crash): nothing left to do.
    again = rollback_tables(plan["id"], {"lake": catalog}, client=client)
    assert {r.action for r in again.values()} == {"unchanged"}
    client.request("POST", f"/unregister/{job}", idempotent=True)


def test_a_full_plan_is_refused_before_anything_changes(catalog, database) -> None:  # type: ignore[no-untyped-def]
    table = catalog.create_table((database, "t"), schema=SCHEMA)
    first = _append(table, 1)
    current = _append(table, 2)
    plan = {"id": "p", "state": "planned", "mode": "full", "reason": "expired", "tables": [
        {"table": f"lake.{database}.t", "distance": 0, "target": {"barrier": 1,
                                                                  "snapshot_id": first},
         "target_available": False, "unavailable_reason": "target snapshot was expired"}]}
    with pytest.raises(RollbackNotIncrementalError) as caught:
        rollback_tables(plan, catalog)
    assert caught.value.tables == {f"lake.{database}.t": "target snapshot was expired"}
    table.refresh()
    assert table.metadata.current_snapshot_id == current


def test_without_a_client_only_iceberg_changes(catalog, database) -> None:  # type: ignore[no-untyped-def]
    table = catalog.create_table((database, "t"), schema=SCHEMA)
    first = _append(table, 1)
    _append(table, 2)
    plan = {"id": "p", "state": "planned", "mode": "incremental", "reason": None, "tables": [
        {"table": f"lake.{database}.t", "distance": 0,
         "target": {"barrier": 1, "snapshot_id": first}, "target_available": True}]}
    assert rollback_tables(plan, catalog)[f"lake.{database}.t"].action == "rolled_back"
    table.refresh()
    assert table.metadata.current_snapshot_id == first
    assert sp.MetaServiceError in RollbackNotIncrementalError.__mro__
