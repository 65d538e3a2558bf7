"""The Iceberg layer without Spark: tagged idempotent commits and read plans, on real tables in
a temporary SQL-catalog warehouse."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, TimeType

import spark_plugin as sp
from spark_plugin import _iceberg as ice
from spark_plugin._iceberg import commits

pytestmark = pytest.mark.iceberg

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "name", StringType(), required=False))


def arrow_rows(ids: list[int], names: list[str] | None = None) -> pa.Table:
    names = names or [f"n{i}" for i in ids]
    return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string())})


@pytest.fixture
def table(catalog, database):
    return catalog.create_table((database, "t"), schema=SCHEMA)


def files_for(table, ids: list[int]):
    return ice.data_files_from_arrow(table, arrow_rows(ids))


def test_commit_carries_tags_and_marker_in_one_snapshot(table) -> None:
    done = ice.commit_sink(table, job="job-a", barrier=10, data_files=files_for(table, [1, 2]),
                           summary={"extra": "x"})
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot.snapshot_id == done.snapshot_id and not done.already_committed
    assert snapshot.summary["metaservice.job"] == "job-a"
    assert snapshot.summary["metaservice.barrier"] == "10"
    assert snapshot.summary["extra"] == "x"
    assert table.properties["metaservice.sink.job-a.last-barrier"] == "10"
    assert done.table.endswith(".t") and done.table.startswith("lake.")
    assert len(table.metadata.metadata_log) == 1  # one metadata update after creation


def test_replay_of_a_committed_barrier_commits_nothing(table) -> None:
    first = ice.commit_sink(table, job="j", barrier=10, data_files=files_for(table, [1]))
    again = ice.commit_sink(table, job="j", barrier=10, data_files=files_for(table, [1]))
    assert again.already_committed and again.snapshot_id == first.snapshot_id
    table.refresh()
    assert len(table.snapshots()) == 1
    assert table.scan().to_arrow().num_rows == 1


def test_a_stale_table_object_does_not_commit_twice(catalog, table) -> None:
    stale = catalog.load_table(table.name())
    ice.commit_sink(table, job="j", barrier=10, data_files=files_for(table, [1]))
    again = ice.commit_sink(stale, job="j", barrier=10, data_files=files_for(stale, [1]))
    assert again.already_committed
    assert len(catalog.load_table(table.name()).snapshots()) == 1


def test_pyiceberg_retry_runs_the_guard_before_rebasing(catalog, table) -> None:
    """pyiceberg retries a commit that lost a race by rebasing it onto the new head; our guard
    must run then, or a zombie writer would commit the barrier a second time."""
    stale = catalog.load_table(table.name())
    ice.commit_sink(table, job="j", barrier=10, data_files=files_for(table, [1]))
    seen = []

    def guard(metadata) -> None:
        seen.append(ice.last_commit_of(metadata, "j"))
        raise commits._AlreadyCommitted

    tx = commits._make_guarded_transaction(stale, guard)
    with tx.update_snapshot(snapshot_properties={"metaservice.job": "j",
                                                 "metaservice.barrier": "10"}).fast_append():
        pass
    with pytest.raises(commits._AlreadyCommitted):
        tx.commit_transaction()
    assert seen and seen[0].barrier == 10
    assert len(catalog.load_table(table.name()).snapshots()) == 1


def test_an_earlier_barrier_after_a_later_one_is_refused(table) -> None:
    ice.commit_sink(table, job="j", barrier=20, data_files=[])
    with pytest.raises(sp.SinkCommitConflictError):
        ice.commit_sink(table, job="j", barrier=10, data_files=[])


def test_other_jobs_commits_do_not_count(table) -> None:
    ice.commit_sink(table, job="other", barrier=50, data_files=files_for(table, [1]))
    done = ice.commit_sink(table, job="j", barrier=10, data_files=files_for(table, [2]))
    assert not done.already_committed


def test_empty_commit_still_makes_a_tagged_snapshot(table) -> None:
    done = ice.commit_sink(table, job="j", barrier=10, data_files=[])
    table.refresh()
    assert table.current_snapshot().snapshot_id == done.snapshot_id
    assert table.current_snapshot().summary["metaservice.barrier"] == "10"


def test_overwrite_replaces_every_live_file_in_one_snapshot(table) -> None:
    ice.commit_sink(table, job="j", barrier=10, data_files=files_for(table, [1, 2, 3]))
    done = ice.commit_sink(table, job="j", barrier=20, data_files=files_for(table, [7]),
                           overwrite=True)
    table.refresh()
    assert table.current_snapshot().snapshot_id == done.snapshot_id
    assert table.current_snapshot().summary.operation.value == "overwrite"
    assert table.scan().to_arrow()["id"].to_pylist() == [7]


def test_after_a_rollback_the_barrier_can_be_committed_again(table) -> None:
    first = ice.commit_sink(table, job="j", barrier=10, data_files=files_for(table, [1]))
    ice.commit_sink(table, job="j", barrier=20, data_files=files_for(table, [2]))
    table.manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()
    assert ice.last_commit_of(table.metadata, "j").barrier == 10  # lineage wins over the marker
    redo = ice.commit_sink(table, job="j", barrier=20, data_files=files_for(table, [3]))
    assert not redo.already_committed
    table.refresh()
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 3]


def test_marker_alone_is_trusted_when_the_history_is_gone(table) -> None:
    ice.commit_sink(table, job="j", barrier=10, data_files=files_for(table, [1]))
    ice.commit_sink(table, job="other", barrier=11, data_files=files_for(table, [2]))
    table.refresh()
    tagged = table.history()[0].snapshot_id
    table.maintenance.expire_snapshots().by_id(tagged).commit()
    table.refresh()
    assert ice.last_commit_of(table.metadata, "j") == ice.LastCommit(10, None)
    with pytest.raises(sp.SinkCommitConflictError):
        ice.commit_sink(table, job="j", barrier=10, data_files=[])
    assert not ice.commit_sink(table, job="j", barrier=12, data_files=[]).already_committed


# -- read plans ---------------------------------------------------------------------------------


def test_one_schema_reads_natively_by_name(table) -> None:
    done = ice.commit_sink(table, job="j", barrier=1, data_files=files_for(table, [1, 2]))
    plan = ice.plan_snapshot_read(table, done.snapshot_id)
    assert (plan.method, plan.by_field_id) == ("native", False)
    assert len(plan.file_paths) == 1
    assert ice.read_arrow(table, plan)["id"].to_pylist() == [1, 2]


def test_after_a_rename_files_with_field_ids_read_natively_by_id(table) -> None:
    done = ice.commit_sink(table, job="j", barrier=1, data_files=files_for(table, [1]))
    with table.update_schema() as update:
        update.rename_column("name", "label")
    table.refresh()
    renamed = arrow_rows([2]).rename_columns(["id", "label"])
    later = ice.commit_sink(table, job="j", barrier=2,
                            data_files=ice.data_files_from_arrow(table, renamed))
    plan = ice.plan_snapshot_read(table, later.snapshot_id)
    assert (plan.method, plan.by_field_id) == ("native", True)
    assert plan.schema.find_field(2).name == "label"
    assert sorted(ice.read_arrow(table, plan).to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "label": "n1"}, {"id": 2, "label": "n2"}]
    old = ice.plan_snapshot_read(table, done.snapshot_id)  # time travel: the schema of then
    assert old.schema.find_field(2).name == "name" and old.by_field_id


def test_files_without_field_ids_after_a_rename_are_read_with_arrow(table, tmp_path) -> None:
    path = f"{table.location()}/data/plain.parquet"
    local = Path(path.removeprefix("file://"))
    local.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(arrow_rows([5], ["five"]), local)
    table.add_files([path])
    table.refresh()
    with table.update_schema() as update:
        update.rename_column("name", "label")
    table.refresh()
    later = ice.commit_sink(table, job="j", barrier=2, data_files=[])
    plan = ice.plan_snapshot_read(table, later.snapshot_id)
    assert plan.method == "arrow" and "no field ids" in plan.reason
    assert ice.read_arrow(table, plan).to_pylist() == [{"id": 5, "label": "five"}]


def test_a_type_promotion_is_read_with_arrow(catalog, database) -> None:
    table = catalog.create_table((database, "p"), schema=Schema(
        NestedField(1, "n", IntegerType(), required=False)))
    data = pa.table({"n": pa.array([1, 2], pa.int32())})
    done = ice.commit_sink(table, job="j", barrier=1,
                           data_files=ice.data_files_from_arrow(table, data))
    with table.update_schema() as update:
        update.update_column("n", LongType())
    table.refresh()
    later = ice.commit_sink(table, job="j", barrier=2, data_files=[])
    plan = ice.plan_snapshot_read(table, later.snapshot_id)
    assert plan.method == "arrow" and "type" in plan.reason
    assert done.snapshot_id != later.snapshot_id


def test_delete_files_force_the_arrow_scan() -> None:
    class File:
        file_path, file_format = "file:///x.parquet", "FileFormat.PARQUET"

    class Task:
        file, delete_files = File(), {object()}

    method, _, reason = ice.choose_read_method(None, SCHEMA, [Task()])  # type: ignore[arg-type]
    assert method == "arrow" and "delete" in reason


def test_snapshot_not_in_the_table_is_an_error(table) -> None:
    with pytest.raises(sp.SnapshotNotFoundError):
        ice.plan_snapshot_read(table, 123456789)


def test_types_spark_cannot_hold_are_refused(catalog, database) -> None:
    table = catalog.create_table((database, "tt"), schema=Schema(
        NestedField(1, "t", TimeType(), required=False)))
    done = ice.commit_sink(table, job="j", barrier=1, data_files=[])
    with pytest.raises(sp.UnsupportedSchemaError):
        ice.plan_snapshot_read(table, done.snapshot_id)


def test_appended_read_lists_only_the_appended_files(table) -> None:
    a = ice.commit_sink(table, job="j", barrier=1, data_files=files_for(table, [1]))
    ice.commit_sink(table, job="j", barrier=2, data_files=files_for(table, [2]))
    c = ice.commit_sink(table, job="j", barrier=3, data_files=files_for(table, [3, 4]))
    plan = ice.plan_appended_read(table, a.snapshot_id, c.snapshot_id)
    assert sorted(ice.read_arrow(table, plan)["id"].to_pylist()) == [2, 3, 4]
    same = ice.plan_appended_read(table, c.snapshot_id, c.snapshot_id)
    assert same.file_paths == ()


def test_appended_read_across_an_overwrite_is_refused(table) -> None:
    a = ice.commit_sink(table, job="j", barrier=1, data_files=files_for(table, [1]))
    b = ice.commit_sink(table, job="j", barrier=2, data_files=files_for(table, [2]),
                        overwrite=True)
    with pytest.raises(sp.NotAppendOnlyError, match="overwrite"):
        ice.plan_appended_read(table, a.snapshot_id, b.snapshot_id)


def test_appended_read_from_a_non_ancestor_is_refused(table) -> None:
    a = ice.commit_sink(table, job="j", barrier=1, data_files=files_for(table, [1]))
    b = ice.commit_sink(table, job="j", barrier=2, data_files=files_for(table, [2]))
    table.manage_snapshots().rollback_to_snapshot(a.snapshot_id).commit()
    c = ice.commit_sink(table, job="j", barrier=3, data_files=files_for(table, [3]))
    with pytest.raises(sp.NotAppendOnlyError, match="ancestor"):
        ice.plan_appended_read(table, b.snapshot_id, c.snapshot_id)


def test_catalog_is_resolved_by_name_and_checked(catalog, database, table) -> None:
    by_name = ice.load_table(f"lake.{database}.t")  # through PYICEBERG_CATALOG__LAKE__*
    assert by_name.metadata.table_uuid == table.metadata.table_uuid
    assert ice.load_table(f"lake.{database}.t", {"lake": catalog}).metadata.table_uuid == \
        table.metadata.table_uuid
    with pytest.raises(ValueError, match="names catalog"):
        ice.load_table(f"other.{database}.t", catalog)


def test_the_hooked_private_pyiceberg_method_is_still_there() -> None:
    """The idempotency guard overrides ``Transaction._rebuild_snapshot_updates`` (pyiceberg
    pins: ``>=0.12,<0.13``). A pyiceberg release that renames it, changes its signature or stops
    calling it from the commit retry loop would silently drop the guard: fail here instead."""
    import inspect

    from pyiceberg.table import Transaction

    method = getattr(Transaction, commits.HOOKED_TRANSACTION_METHOD, None)
    assert callable(method), f"pyiceberg's Transaction lost {commits.HOOKED_TRANSACTION_METHOD}"
    assert list(inspect.signature(method).parameters) == ["self"]
    retry_loop = inspect.getsource(Transaction.commit_transaction)
    assert f"self.{commits.HOOKED_TRANSACTION_METHOD}()" in retry_loop
    # ... and it is called while the CommitFailedException of the attempt is being handled, which
    # is how the guard tells a refusal of MetaService's catalog from a conflict.
    handler = retry_loop[retry_loop.index("except CommitFailedException"):]
    assert f"self.{commits.HOOKED_TRANSACTION_METHOD}()" in handler


def test_a_catalog_that_cannot_answer_now_is_no_refusal_of_the_commit() -> None:
    """The catalog's 503 (``object_store_unavailable`` while the store is down,
    ``database_unavailable``) is the plugin's ServiceUnavailableError, to be retried, not a
    400; its refusals keep their statuses."""
    from pyiceberg.exceptions import BadRequestError, CommitFailedException
    from pyiceberg.exceptions import ServiceUnavailableError as IcebergUnavailable

    down = commits.refusal(IcebergUnavailable(
        "ServiceUnavailableException: metaservice object_store_unavailable: retry later"))
    assert isinstance(down, sp.ServiceUnavailableError) and down.status_code == 503
    assert down.code == "object_store_unavailable"
    refused = commits.refusal(BadRequestError("metaservice barrier_regression: no"))
    assert refused is not None and refused.status_code == 400
    conflict = commits.refusal(CommitFailedException("metaservice concurrent_update: again"))
    assert conflict is None
