"""Names as the Iceberg REST specification has them, end to end: a pipeline over tables whose
names hold spaces, dots, accents and backticks, in the namespace of two levels ``sales dept``,
``eu.west``::

    orders été (root) ──sum──▶ totals.v2 ──report──▶ report `q1`

Tables are created and committed through the Spark plugin's Iceberg layer on MetaService's
built-in catalog (pyiceberg, no JVM: the catalog records each tagged commit's barrier), jobs are
planned and stepped through the plugin's client. Every answer of the core API (versions, leases,
delay, lineage) names the tables in the dotted form, ``lake.`sales dept`.`eu.west`.`totals.v2```,
and reaches them at their URL path (levels joined by %1F); the dashboard lists and opens them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

import spark_plugin as sp
from metaservice.clock import ManualClock
from metaservice_names import TableName
from spark_plugin import _iceberg as ice
from tests.conftest import ServerThread
from tests.metaservice.catalog.conftest import rest_catalog
from tests.metaservice.ui.test_dashboard_browser import (  # noqa: F401 - the fixture
    _console_errors,
    _wait,
    browser,
)

NAMESPACE = ("sales dept", "eu.west")
ORDERS, TOTALS, REPORT = (TableName.of("lake", NAMESPACE, t)
                          for t in ("orders été", "totals.v2", "report `q1`"))
JOBS = {"sum": (ORDERS, TOTALS), "report": (TOTALS, REPORT)}
T0 = 1_700_000_000_000
B1, B2 = T0 - 20_000, T0 - 10_000


def test_the_dotted_names_are_those_of_the_specification() -> None:
    assert str(ORDERS) == "lake.`sales dept`.`eu.west`.`orders été`"
    assert str(TOTALS) == "lake.`sales dept`.`eu.west`.`totals.v2`"
    assert str(REPORT) == "lake.`sales dept`.`eu.west`.`report ``q1```"
    assert TOTALS.path == "lake/sales%20dept%1Feu.west/totals.v2"


def spark_schema(column: str):  # pyspark's types are plain Python: no JVM starts
    from pyspark.sql.types import LongType, StructField, StructType

    return StructType([StructField(column, LongType())])


class Pipeline:
    """The pipeline, stepped by hand: each job reads its source at the barrier handed out and
    overwrites its sink with one row, committed with the job and the barrier as tags."""

    def __init__(self, catalog: RestCatalog, client: sp.MetaServiceClient) -> None:
        self.catalog, self.client = catalog, client
        for name, column in ((ORDERS, "amount"), (TOTALS, "total"), (REPORT, "total")):
            sp.create_table_from_spark_schema(name, spark_schema(column), catalog=catalog)
        for job, (source, sink) in JOBS.items():
            assert client.register_source(job, source).sources == (str(source),)
            assert client.register_sink(job, sink).sinks == (str(sink),)
        self.after: dict[str, int] = {}

    def table(self, name: TableName) -> Any:
        return ice.load_table(name, self.catalog, client=self.client)

    def ingest(self, barrier: int, amounts: list[int]) -> int:
        table = self.table(ORDERS)
        rows = pa.table({"amount": pa.array(amounts, pa.int64())})
        done = ice.commit_sink(table, job="pos", barrier=barrier, root=True,
                               data_files=ice.data_files_from_arrow(table, rows))
        return int(done.snapshot_id)

    def step(self, job: str) -> int:
        source, sink = JOBS[job]
        position = (self.client.next_barrier(job, self.after[job]) if job in self.after
                    else self.client.start_job(job, "earliest"))
        assert position.action == "process", position
        assert position.barrier is not None
        assert set(position.snapshots) == {str(source)}
        read = self.table(source).scan(snapshot_id=position.snapshots[str(source)]).to_arrow()
        total = sum(v for v in read.column(0).to_pylist() if v is not None)
        table = self.table(sink)
        rows = pa.table({"total": pa.array([total], pa.int64())})
        ice.commit_sink(table, job=job, barrier=position.barrier, overwrite=True,
                        data_files=ice.data_files_from_arrow(table, rows))
        self.after[job] = position.barrier
        return position.barrier


@pytest.fixture
def pipeline(catalog: RestCatalog, server: ServerThread,
             clock: ManualClock) -> Iterator[Pipeline]:
    clock.set(T0)
    with sp.MetaServiceClient(server.url) as client:
        yield Pipeline(catalog, client)


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def total(catalog: RestCatalog, name: TableName, snapshot_id: int) -> list[int]:
    return catalog.load_table(name.identifier).scan(
        snapshot_id=snapshot_id).to_arrow().column(0).to_pylist()


def run(pipeline: Pipeline) -> dict[int, int]:
    """Two barriers of ingestion; ``sum`` processes both, ``report`` only the first. Answers
    the snapshots of ``orders été`` by barrier."""
    ingested = {B1: pipeline.ingest(B1, [1, 2, 3])}
    assert pipeline.step("sum") == B1
    assert pipeline.step("report") == B1
    ingested[B2] = pipeline.ingest(B2, [10])
    assert pipeline.step("sum") == B2
    return ingested


def test_a_pipeline_over_nested_names_is_versioned_leased_and_described_by_its_dotted_names(
        pipeline: Pipeline, client: httpx.Client, catalog: RestCatalog) -> None:
    ingested = run(pipeline)
    names = {str(ORDERS), str(TOTALS), str(REPORT)}

    # Each table's barriers were recorded by the catalog's commits, under its dotted name.
    for name, latest in ((ORDERS, B2), (TOTALS, B2), (REPORT, B1)):
        barriers = pipeline.client.table_barriers(name)
        assert barriers["table"] == str(name) and barriers["latest_barrier"] == latest

    # Consistent versions: the strong cut is B1 (report is behind); a weak one is the table's
    # own latest.
    strong = {n: ok(client.get(f"/version/strong/{n.path}")) for n in (ORDERS, TOTALS, REPORT)}
    assert {v["table"]: v["barrier"] for v in strong.values()} == dict.fromkeys(names, B1)
    assert strong[ORDERS]["snapshot_id"] == ingested[B1]
    assert total(catalog, TOTALS, strong[TOTALS]["snapshot_id"]) == [6]
    assert total(catalog, REPORT, strong[REPORT]["snapshot_id"]) == [6]
    assert ok(client.get(f"/version/weak/{TOTALS.path}"))["barrier"] == B2
    versions = pipeline.client.get_versions([ORDERS, TOTALS, REPORT], "strong",
                                            lease_seconds=600, holder="names-e2e")
    assert {n: (v.table, v.barrier) for n, v in versions.versions.items()} == {
        n: (n, B1) for n in names}
    assert versions.lease_id is not None

    # A lease by name, listed by name, released.
    lease = pipeline.client.create_lease(
        "report été", 600, {str(TOTALS): strong[TOTALS]["snapshot_id"]})
    listed = pipeline.client.list_leases(table=TOTALS)
    assert {(entry["lease_id"], entry["holder"]) for entry in listed} == {
        (lease.lease_id, "report été"), (versions.lease_id, "names-e2e")}
    assert [s["table"] for s in ok(client.get(f"/leases/{lease.lease_id}"))["snapshots"]] == \
        [str(TOTALS)]
    protected = pipeline.client.protected_snapshots(TOTALS)
    assert strong[TOTALS]["snapshot_id"] in protected
    pipeline.client.release_lease(lease.lease_id, missing_ok=False)
    pipeline.client.release_lease(versions.lease_id, missing_ok=False)
    assert pipeline.client.list_leases(table=TOTALS) == []

    # Delay and lineage name the tables in the dotted form and reach them at their paths.
    delay = ok(client.get("/delay"))
    assert {t["table"] for t in delay["tables"]} == names
    jobs = {j["job"]: (j["sources"], j["sinks"]) for j in delay["jobs"]}
    assert jobs == {"sum": ([str(ORDERS)], [str(TOTALS)]),
                    "report": ([str(TOTALS)], [str(REPORT)])}
    detail = ok(client.get(f"/delay/{REPORT.path}"))
    assert detail["table"] == str(REPORT)
    assert detail["bottleneck"]["job"] == "report"
    assert [(h["job"], h["source"], h["sink"]) for h in detail["path"]] == [
        ("report", str(TOTALS), str(REPORT)), ("sum", str(ORDERS), str(TOTALS))]
    assert detail["root"]["table"] == str(ORDERS)
    lineage = ok(client.get("/lineage"))
    assert {t["table"] for t in lineage["tables"]} == names
    assert {j["job"]: (j["sources"], j["sinks"]) for j in lineage["jobs"]} == jobs
    upstream = ok(client.get(f"/lineage/{REPORT.path}"))
    assert str(ORDERS) in str(upstream) and str(TOTALS) in str(upstream)
    at_b1 = ok(client.get(f"/lineage/{REPORT.path}/barriers/{B1}"))
    assert str(ORDERS) in str(at_b1)

    # The metrics label each table with its dotted name.
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    for name in names:
        assert f'metaservice_table_lag_seconds{{table="{name}"}}' in metrics.text, name

    # A consistent warehouse of the catalog reads the three tables at the strong cut.
    strong_catalog = rest_catalog(str(client.base_url), warehouse="lake@strong")
    read = {n: strong_catalog.load_table(n.identifier).scan().to_arrow().column(0).to_pylist()
            for n in (ORDERS, TOTALS, REPORT)}
    assert read == {ORDERS: [1, 2, 3], TOTALS: [6], REPORT: [6]}


@pytest.mark.browser
def test_the_dashboard_lists_draws_and_opens_the_pipeline_s_tables(
        pipeline: Pipeline, client: httpx.Client, browser: Any) -> None:  # noqa: F811
    run(pipeline)
    browser.get(f"{client.base_url}/ui")
    _wait(browser, "return document.body.dataset.ready === 'true'")
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#tables tbody tr')].map(r => r.dataset.table);")
    assert sorted(rows) == sorted([str(ORDERS), str(TOTALS), str(REPORT)])
    assert browser.execute_script("return document.body.dataset.bottleneck") == "report"
    labels = browser.execute_script(
        "return window.metaservice.state.cy.nodes('.table')"
        ".map(n => n.data('label').split('\\n')[0]).sort();")
    assert labels == sorted(str(n).removeprefix("lake.") for n in (ORDERS, TOTALS, REPORT))

    browser.execute_script(
        "[...document.querySelectorAll('#tables tbody tr')]"
        ".find(r => r.dataset.table === arguments[0]).click();", str(REPORT))
    _wait(browser, "return document.body.dataset.tableBottleneck === 'report'")
    details = _wait(browser, "const t = document.getElementById('details-body').textContent;"
                             "return t.includes('Barriers and snapshots') && t.includes('report')"
                             " && t.includes('Protected') && t;")
    assert "not available" not in details, details
    assert f"{TOTALS} → {REPORT}" in details
    critical = browser.execute_script(
        "return window.metaservice.state.cy.edges('.critical').map(e => e.id()).sort();")
    assert critical == sorted([f"table:{ORDERS}>job:sum", f"job:sum>table:{TOTALS}",
                               f"table:{TOTALS}>job:report", f"job:report>table:{REPORT}"])
    assert _console_errors(browser) == []
