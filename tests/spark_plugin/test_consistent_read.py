"""consistent_read against the real server: exact snapshots, leases, refusals."""

from __future__ import annotations

import pytest

import spark_plugin as sp
from spark_plugin import _iceberg as ice

pytestmark = pytest.mark.spark


def batch(spark, rows: list[tuple[int, str]], name_column: str = "name"):
    return spark.createDataFrame(rows, f"id long, {name_column} string")


@pytest.fixture
def roots(spark, catalog, database) -> tuple[str, str]:
    names = (f"lake.{database}.left", f"lake.{database}.right")
    for n in names:
        sp.create_table_from_spark_schema(n, batch(spark, []).schema, catalog=catalog)
    return names


def test_frames_read_exactly_the_answered_snapshots(spark, catalog, client, roots):
    left, right = roots
    sp.append_root(spark, batch(spark, [(1, "a")]), left, client=client, catalog=catalog,
                   barrier=1_000)
    sp.append_root(spark, batch(spark, [(2, "b")]), left, client=client, catalog=catalog,
                   barrier=2_000)
    r = sp.append_root(spark, batch(spark, [(3, "c")]), right, client=client, catalog=catalog,
                       barrier=1_500)
    with sp.consistent_read(spark, roots, "weak", client=client, catalog=catalog) as frames:
        # unrelated tables never hold each other back
        assert frames.versions[left].barrier == 2_000
        assert frames.versions[right] == sp.TableVersion(right, 1_500, r.snapshot_id)
        assert sorted(x.id for x in frames[left].collect()) == [1, 2]
        assert [x.id for x in frames[right].collect()] == [3]
    with sp.consistent_read(spark, [left], barrier=1_000, client=client,
                            catalog=catalog) as frames:
        assert [x.id for x in frames[left].collect()] == [1]


def test_a_snapshot_missing_from_iceberg_is_an_error_not_other_data(spark, catalog, client,
                                                                    roots):
    left, _ = roots
    sp.append_root(spark, batch(spark, [(1, "a")]), left, client=client, catalog=catalog,
                   barrier=1_000)
    client.report_root_barrier(left, 424242, 2_000)  # a snapshot this table never had
    with (pytest.raises(sp.SnapshotNotFoundError),
          sp.consistent_read(spark, [left], client=client, catalog=catalog)):
        pass


def test_a_table_never_reported_is_unknown(spark, catalog, client, roots):
    """Created in Iceberg, but no barrier of it ever reported: the service has not heard of it."""
    with (pytest.raises(sp.UnknownTableError),
          sp.consistent_read(spark, roots, client=client, catalog=catalog)):
        pass


def test_the_lease_lives_for_the_block_only(spark, catalog, client, roots):
    """The server leases the answered snapshots in the answer's transaction
    (docs/contract.md#leases): inside the block that lease protects exactly the snapshot read;
    after it, the lease is gone."""
    left, _ = roots
    r = sp.append_root(spark, batch(spark, [(1, "a")]), left, client=client, catalog=catalog,
                       barrier=1_000)
    with sp.consistent_read(spark, [left], client=client, catalog=catalog,
                            lease_seconds=30) as frames:
        lease_id = frames.lease_id
        assert lease_id is not None, "the server answered the versions without leasing them"
        live = client.list_leases(table=left)
        assert [(lease["lease_id"], lease["snapshots"]) for lease in live] == [
            (lease_id, [{"table": left, "snapshot_id": r.snapshot_id}])]
        assert frames[left].count() == 1
    assert client.list_leases(table=left) == []
    with pytest.raises(sp.UnknownLeaseError):
        client.renew_lease(lease_id, 30)


def test_a_renamed_column_reads_correct_values(spark, catalog, client, roots):
    left, _ = roots
    sp.append_root(spark, batch(spark, [(1, "a"), (2, "b")]), left, client=client,
                   catalog=catalog, barrier=1_000)
    table = ice.load_table(left, catalog)
    with table.update_schema() as update:
        update.rename_column("name", "label")
    sp.append_root(spark, batch(spark, [(3, "c")], name_column="label"), left, client=client,
                   catalog=catalog, barrier=2_000)
    with sp.consistent_read(spark, [left], client=client, catalog=catalog) as frames:
        df = frames[left]
        assert df.columns == ["id", "label"]
        assert sorted((x.id, x.label) for x in df.collect()) == [(1, "a"), (2, "b"), (3, "c")]
