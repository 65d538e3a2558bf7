"""Safe expiration on real Iceberg tables (pyiceberg SQL catalog on SQLite, no Spark) against
the real server: protected snapshots stay readable, the approved ones are gone."""

from __future__ import annotations

import json
from datetime import timedelta

import pyarrow as pa
import pytest

import spark_plugin as sp
from spark_plugin.maintenance import main, select_candidates

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


def make_table(catalog, database: str, name: str = "events"):  # type: ignore[no-untyped-def]
    return catalog.create_table((database, name), schema=SCHEMA)


def append(table, client: sp.MetaServiceClient, value: int, *, report: bool = True) -> int:  # type: ignore[no-untyped-def]
    """Append one row as one snapshot and (by default) report it as a root barrier."""
    table.append(pa.table({"id": [value]}, schema=SCHEMA))
    snapshot = table.current_snapshot().snapshot_id
    if report:
        name = f"lake.{table.name()[-2]}.{table.name()[-1]}"
        client.report_root_barrier(name, snapshot)
    return snapshot


def rows_at(table, snapshot_id: int) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(table.scan(snapshot_id=snapshot_id).to_arrow()["id"].to_pylist())


def test_only_unprotected_snapshots_are_expired(catalog, database: str,
                                                client: sp.MetaServiceClient) -> None:
    table = make_table(catalog, database)
    name = f"lake.{database}.events"
    snapshots = [append(table, client, i) for i in range(6)]
    lease = client.create_lease("report-42", 300, {name: snapshots[1]})

    summary = sp.expire_snapshots(name, client=client, catalog=catalog)

    assert summary.table == name and not summary.dry_run
    assert summary.candidates == tuple(snapshots[:5])  # never the current snapshot
    assert summary.refused == {snapshots[1]: f"lease:{lease.lease_id}"}
    assert summary.approved == summary.expired == (snapshots[0], *snapshots[2:5])
    assert summary.retained == 2
    table = catalog.load_table((database, "events"))
    for gone in summary.expired:
        assert table.metadata.snapshot_by_id(gone) is None
    protected = client.protected_snapshots(name)
    assert set(protected) == {snapshots[1], snapshots[5]}
    for snapshot_id in protected:  # every protected snapshot is still readable
        position = snapshots.index(snapshot_id)
        assert rows_at(table, snapshot_id) == list(range(position + 1))
    # An expired snapshot is never handed out again.
    barriers = {b["snapshot_id"]: b["barrier"]
                for b in client.table_barriers(name)["barriers"]}
    with pytest.raises(sp.SnapshotExpiredError):
        client.get_versions([name], barrier=barriers[snapshots[0]])
    # A second run finds nothing new to expire.
    again = sp.expire_snapshots(name, client=client, catalog=catalog)
    assert again.approved == () and again.refused == {snapshots[1]: f"lease:{lease.lease_id}"}


def test_what_a_running_job_reads_is_kept(catalog, database: str,
                                          client: sp.MetaServiceClient) -> None:
    """A job that committed the barrier of snapshot 2 keeps 2..latest: its next step reads the
    appends since 2 by walking the snapshot ancestry, which must stay intact."""
    table = make_table(catalog, database, "source")
    name, sink = f"lake.{database}.source", f"lake.{database}.sink"
    snapshots = [append(table, client, i) for i in range(5)]
    barriers = {b["snapshot_id"]: b["barrier"] for b in client.table_barriers(name)["barriers"]}
    job = f"enrich-{database}"
    client.register_source(job, name)
    client.register_sink(job, sink)
    start = client.start_job(job, barriers[snapshots[2]])
    assert start.snapshots == {name: snapshots[2]}
    client.commit(job, sink, 777, start.barrier)
    try:
        summary = sp.expire_snapshots(name, client=client, catalog=catalog)
        assert summary.expired == tuple(snapshots[:2])
        assert summary.refused == {snapshots[2]: f"job_source:{job}",
                                   snapshots[3]: f"job_source:{job}"}
        table = catalog.load_table((database, "source"))
        changes = table.incremental_append_scan(
            from_snapshot_id_exclusive=snapshots[2],
            to_snapshot_id_inclusive=snapshots[4]).to_arrow()
        assert sorted(changes["id"].to_pylist()) == [3, 4]
        assert rows_at(table, snapshots[2]) == [0, 1, 2]
    finally:
        client.unregister(job)


def test_unreported_snapshots_are_kept_unless_asked(catalog, database: str,
                                                    client: sp.MetaServiceClient) -> None:
    table = make_table(catalog, database)
    name = f"lake.{database}.events"
    first = append(table, client, 0)
    hidden = append(table, client, 1, report=False)
    append(table, client, 2)
    kept = sp.expire_snapshots(name, client=client, catalog=catalog)
    assert kept.expired == (first,) and kept.refused == {hidden: "unknown"}
    gone = sp.expire_snapshots(name, client=client, catalog=catalog, approve_unknown=True)
    assert gone.expired == (hidden,)
    assert catalog.load_table((database, "events")).metadata.snapshot_by_id(hidden) is None


def test_age_and_retain_last_limit_the_candidates(catalog, database: str,
                                                  client: sp.MetaServiceClient) -> None:
    table = make_table(catalog, database)
    name = f"lake.{database}.events"
    snapshots = [append(table, client, i) for i in range(5)]
    assert select_candidates(table.metadata, cutoff_ms=None, retain_last=3) == snapshots[:2]
    with pytest.raises(ValueError):
        select_candidates(table.metadata, cutoff_ms=None, retain_last=0)
    young = sp.expire_snapshots(name, client=client, catalog=catalog,
                                older_than=timedelta(hours=1))
    assert young.candidates == () and young.expiration_id is None and young.retained == 5

    dry = sp.expire_snapshots(name, client=client, catalog=catalog, retain_last=2, dry_run=True)
    assert dry.dry_run and dry.approved == tuple(snapshots[:3]) and dry.expired == ()
    assert len(catalog.load_table((database, "events")).metadata.snapshots) == 5
    # Nothing was approved by the dry run: every snapshot can still be leased.
    client.release_lease(client.create_lease("check", 5, {name: snapshots[0]}).lease_id)

    done = sp.expire_snapshots(name, client=client, catalog=catalog, retain_last=2)
    assert done.expired == tuple(snapshots[:3]) and done.retained == 2


def test_command_line(catalog, database: str, client: sp.MetaServiceClient,
                      live_server_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The catalog is found by name through pyiceberg's configuration (PYICEBERG_CATALOG__LAKE__*
    set by the conftest)."""
    table = make_table(catalog, database)
    name = f"lake.{database}.events"
    snapshots = [append(table, client, i) for i in range(4)]

    assert main([name, "--url", live_server_url, "--retain-last", "2", "--dry-run"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{name}: 2 candidates, 2 approved, would expire 2, 0 refused")

    assert main([name, "--url", live_server_url, "--retain-last", "2", "--json",
                 "--catalog", "lake"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["expired"] == snapshots[:2] and out["table"] == name

    assert main([f"lake.{database}.missing", name, "--url", live_server_url]) == 1
    captured = capsys.readouterr()
    assert "missing" in captured.err and "Traceback" not in captured.err
    assert f"{name}: 1 candidates" in captured.out  # the other table was still handled
    assert main(["not-a-table", "--url", live_server_url]) == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["--retain-last", "0", name])
    assert exit_info.value.code == 2


def test_the_command_says_what_configuration_is_missing(monkeypatch, capsys, live_server_url):
    """No pyiceberg configuration for the table's catalog, no reachable server: one line each,
    exit status 2, before any table is touched; the server defaults to 127.0.0.1:8000."""
    monkeypatch.delenv("METASERVICE_URL", raising=False)
    assert main(["nowhere.db.t", "--url", live_server_url]) == 2
    err = capsys.readouterr().err
    assert "pyiceberg catalog 'nowhere'" in err and "PYICEBERG_CATALOG__NOWHERE__WAREHOUSE" in err
    assert err.count("\n") == 1 and "Traceback" not in err

    monkeypatch.setenv("METASERVICE_URL", "http://127.0.0.1:9")  # nothing listens on discard
    assert main(["lake.db.t"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach MetaService at http://127.0.0.1:9" in err and "METASERVICE_URL" in err
    assert err.count("\n") == 1

    monkeypatch.delenv("METASERVICE_URL")
    from spark_plugin.maintenance import _parser
    assert _parser().parse_args(["lake.db.t"]).url == "http://127.0.0.1:8000"
