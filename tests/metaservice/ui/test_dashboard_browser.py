"""The dashboard in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
installed by ``.ci/install-system-packages.sh``), driven by Selenium.

The seeded pipeline has one obvious bottleneck::

    r1 ──j_fast──▶ t1 ──┐
     └───j_slow──▶ t2 ──┴──j_join──▶ t3

r1 completed barriers T0 − 600 s and T0 − 10 s; j_fast followed, j_slow did not (local lag
590 s), so t2 and t3 are 600 s behind and j_slow is the bottleneck of t3 and overall.

Further tests load a realistic pipeline (six jobs, fan-out and fan-in, a source read three
layers down, snapshot ids beyond 2^53) at 1280, 1400 and 1920 px, and the walk-through's
small-number barriers (10, 20, 30). The browser runs in a time zone far from UTC, so a local
time on the page would show.

Missing Chromium skips these tests on a developer machine and fails them under CI (``CI`` or
``METASERVICE_REQUIRE_BROWSER`` set).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest

from metaservice.clock import ManualClock
from tests.conftest import missing

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("METASERVICE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("METASERVICE_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                  "--window-size=1400,1000",
                  # offline, as on a machine with no internet: no host name resolves but
                  # loopback's, so an asset from anywhere else fails to load
                  "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
T0 = 1_700_000_000_000
BROWSER_TZ = "Asia/Kathmandu"  # UTC+05:45: neither hours nor minutes agree with UTC


def _unavailable(message: str) -> NoReturn:
    missing(message + " (install it with .ci/install-system-packages.sh)",
            required_by="METASERVICE_REQUIRE_BROWSER")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    for program in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.exists(program) or shutil.which(program)):
            _unavailable(f"{program} is missing")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("the selenium package is missing")
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium download a driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER, env={**os.environ, "TZ": BROWSER_TZ})
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _seed(client: httpx.Client, clock: ManualClock) -> None:
    clock.set(T0)

    def ok(response: httpx.Response) -> dict:
        assert response.status_code in (200, 201), response.text
        return response.json()

    for job, sources, sink in (("j_fast", ["r1"], "t1"), ("j_slow", ["r1"], "t2"),
                               ("j_join", ["t1", "t2"], "t3")):
        for s in sources:
            ok(client.post(f"/register/source/{job}/lake/db/{s}"))
        ok(client.post(f"/register/sink/{job}/lake/db/{sink}"))
    old, new = T0 - 600_000, T0 - 10_000
    ok(client.post("/tables/lake/db/r1/barriers", json={"snapshot_id": 11, "barrier": old}))
    for job, sink, snapshot in (("j_fast", "t1", 21), ("j_slow", "t2", 31), ("j_join", "t3", 41)):
        assert ok(client.post(f"/jobs/{job}/start"))["barrier"] == old
        ok(client.post(f"/commit/{job}/lake/db/{sink}",
                       json={"barrier": old, "snapshot_id": snapshot}))
    ok(client.post("/tables/lake/db/r1/barriers", json={"snapshot_id": 12, "barrier": new}))
    assert ok(client.post("/jobs/j_fast/barriers/next", json={"after": old}))["barrier"] == new
    ok(client.post("/commit/j_fast/lake/db/t1", json={"barrier": new, "snapshot_id": 22}))
    ok(client.post("/leases", json={"holder": "report-42", "ttl_seconds": 3600,
                                    "snapshots": [{"table": "lake.db.t3", "snapshot_id": 41}]}))


def _wait(driver: Any, script: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = driver.execute_script(script)
        if value:
            return value
        if time.monotonic() > deadline:
            page = driver.execute_script(
                "return [document.getElementById('status').innerText,"
                " document.getElementById('details-body').innerText].join('\\n')")
            raise AssertionError(f"timed out waiting for: {script}\npage: {page}\n"
                                 f"console: {driver.get_log('browser')}")
        time.sleep(0.1)


def _console_errors(driver: Any) -> list[str]:
    return [f"{e['level']}: {e['message']}" for e in driver.get_log("browser")
            if e["level"] in ("SEVERE", "ERROR")]


def test_dashboard_shows_the_topology_and_highlights_the_bottleneck(
        browser: Any, client: httpx.Client, clock: ManualClock, tmp_path: Path) -> None:
    _seed(client, clock)
    browser.get(f"{client.base_url}/ui")
    _wait(browser, "return document.body.dataset.ready === 'true'")

    counts = browser.execute_script(
        "const cy = window.metaservice.state.cy;"
        "return [cy.nodes('.table').length, cy.nodes('.job').length, cy.edges().length];")
    assert counts == [4, 3, 7]
    assert browser.execute_script("return document.body.dataset.bottleneck") == "j_slow"
    highlighted = browser.execute_script(
        "return window.metaservice.state.cy.nodes('.bottleneck').map(n => n.id());")
    assert highlighted == ["job:j_slow"]
    classes = browser.execute_script(
        "const cy = window.metaservice.state.cy; return Object.fromEntries("
        "['r1','t1','t2','t3'].map(t => [t, ['lag-ok','lag-warn','lag-bad','lag-none']"
        ".find(c => cy.getElementById('table:lake.db.' + t).hasClass(c))]));")
    assert classes == {"r1": "lag-ok", "t1": "lag-ok", "t2": "lag-bad", "t3": "lag-bad"}
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#tables tbody tr')].map(r => r.dataset.table);")
    assert rows[:2] == ["lake.db.t2", "lake.db.t3"]          # worst lag first

    # A table: its bottleneck and critical path, barriers, leases, protections.
    browser.find_element("css selector", "#tables tr[data-table='lake.db.t3']").click()
    _wait(browser, "return document.body.dataset.tableBottleneck === 'j_slow'")
    details = _wait(browser, "const t = document.getElementById('details-body').textContent;"
                             "return t.includes('report-42') && t.includes('lease:') && t;")
    assert "Barriers and snapshots" in details and "41" in details
    browser.save_screenshot(str(tmp_path / "dashboard-bottleneck.png"))
    critical = browser.execute_script(
        "return window.metaservice.state.cy.edges('.critical').map(e => e.id()).sort();")
    assert critical == ["job:j_join>table:lake.db.t3", "job:j_slow>table:lake.db.t2",
                        "table:lake.db.r1>job:j_slow", "table:lake.db.t2>job:j_join"]

    # A job: its recent barriers with start, duration and attempts.
    browser.execute_script("window.metaservice.select('job:j_fast')")
    details = _wait(browser, "const t = document.getElementById('details-body').textContent;"
                             "return t.includes('Recent barriers') && t.includes('committed')"
                             " && t;")
    assert "attempts" in details

    # Auto-refresh picks up a new barrier without a reload.
    refreshes = int(browser.execute_script("return document.body.dataset.refreshes"))
    browser.execute_script("const s = document.getElementById('refresh'); s.value = '2000';"
                           "s.dispatchEvent(new Event('change'));")
    client.post("/commit/j_slow/lake/db/t2", json={"barrier": T0 - 600_000, "snapshot_id": 31})
    assert client.post("/jobs/j_slow/barriers/next",
                       json={"after": T0 - 600_000}).json()["barrier"] == T0 - 10_000
    assert client.post("/commit/j_slow/lake/db/t2",
                       json={"barrier": T0 - 10_000, "snapshot_id": 32}).status_code == 200
    _wait(browser, f"return Number(document.body.dataset.refreshes) > {refreshes} && "
                   "window.metaservice.state.cy.getElementById('table:lake.db.t2')"
                   ".hasClass('lag-ok')", timeout=15)
    assert browser.execute_script("return document.body.dataset.bottleneck") == "j_join"

    screenshot = tmp_path / "dashboard.png"
    assert browser.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 10_000
    assert _console_errors(browser) == []


# -- a realistic pipeline at several widths ---------------------------------------------------

BIG_SNAPSHOT = 8_333_412_345_678_901_234  # beyond 2^53: a JavaScript number would round it
PIPELINE = (
    ("enrich_orders_with_customers", ("orders", "customers"), "orders_enriched"),
    ("daily_revenue_by_region", ("orders_enriched",), "daily_revenue"),
    ("fraud_scoring", ("orders_enriched",), "fraud_alerts"),
    ("customer_ltv", ("orders_enriched", "customers"), "customer_lifetime_value"),
    ("ledger_export", ("orders",), "ledger_entries"),
    ("exec_summary", ("daily_revenue", "customer_lifetime_value", "fraud_alerts"),
     "executive_summary"),
)


def _ok(response: httpx.Response) -> dict:
    assert response.status_code in (200, 201), response.text
    return response.json()


def _seed_pipeline(client: httpx.Client, clock: ManualClock) -> None:
    """Three rounds of ingestion; each job follows for as many rounds as it keeps up with."""
    clock.set(T0)
    for job, sources, sink in PIPELINE:
        for s in sources:
            _ok(client.post(f"/register/source/{job}/lake/sales/{s}"))
        _ok(client.post(f"/register/sink/{job}/lake/sales/{sink}"))
    rounds = {"enrich_orders_with_customers": 3, "daily_revenue_by_region": 3,
              "fraud_scoring": 2, "customer_ltv": 1, "ledger_export": 3, "exec_summary": 1}
    snapshot = BIG_SNAPSHOT
    last: dict[str, int] = {}
    for i, barrier in enumerate((T0 - 900_000, T0 - 240_000, T0 - 30_000)):
        for root in ("orders", "customers"):
            _ok(client.post(f"/tables/lake/sales/{root}/barriers",
                            json={"snapshot_id": snapshot, "barrier": barrier}))
            snapshot += 1
        for job, _sources, sink in PIPELINE:
            if rounds[job] <= i:
                continue
            step = _ok(client.post(f"/jobs/{job}/start") if job not in last else
                       client.post(f"/jobs/{job}/barriers/next", json={"after": last[job]}))
            assert step["action"] == "process" and step["barrier"] == barrier, step
            _ok(client.post(f"/commit/{job}/lake/sales/{sink}",
                            json={"barrier": barrier, "snapshot_id": snapshot}))
            snapshot += 1
            last[job] = barrier
    latest = _ok(client.get("/tables/lake/sales/orders/barriers"))["latest_snapshot_id"]
    _ok(client.post("/leases", json={"holder": "report-42", "ttl_seconds": 3600,
                                     "snapshots": [{"table": "lake.sales.orders",
                                                    "snapshot_id": latest}]}))


# Every node's label box against every edge's drawn polyline and every other node: what the
# eye sees as a label crossed by an arrow or two labels on top of each other.
_GEOMETRY = """
const cy = window.metaservice.state.cy;
const labelOnly = {includeNodes: false, includeEdges: false, includeLabels: true,
                   includeOverlays: false};
const whole = {includeNodes: true, includeEdges: false, includeLabels: true,
               includeOverlays: false};
function meets(p, q, b) {  // Liang-Barsky: does segment pq enter box b?
  let t0 = 0, t1 = 1;
  const dx = q.x - p.x, dy = q.y - p.y;
  for (const [a, c] of [[-dx, p.x - b.x1], [dx, b.x2 - p.x], [-dy, p.y - b.y1],
                        [dy, b.y2 - p.y]]) {
    if (a === 0) { if (c < 0) return false; continue; }
    const r = c / a;
    if (a < 0) { if (r > t1) return false; if (r > t0) t0 = r; }
    else { if (r < t0) return false; if (r < t1) t1 = r; }
  }
  return t0 <= t1;
}
const overlap = (a, b) => a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2;
const nodes = cy.nodes().map(n => ({id: n.id(), label: n.boundingBox(labelOnly),
                                    box: n.boundingBox(whole)}));
const crossed = [], stacked = [];
cy.edges().forEach(e => {
  const line = [e.sourceEndpoint(), ...(e.segmentPoints() || []), e.targetEndpoint()];
  for (const n of nodes) {
    for (let i = 1; i < line.length; i++) {
      if (meets(line[i - 1], line[i], n.label)) { crossed.push(e.id() + ' over ' + n.id); break; }
    }
  }
});
for (let i = 0; i < nodes.length; i++) for (let j = i + 1; j < nodes.length; j++) {
  if (overlap(nodes[i].box, nodes[j].box)) stacked.push(nodes[i].id + ' on ' + nodes[j].id);
}
const empty = nodes.filter(n => !(n.label.w > 0 && n.label.h > 0)).map(n => n.id);
return {crossed, stacked, empty, edges: cy.edges().length};
"""

# Whatever does not fit the window: the page scrolling sideways, a cell of the lists beyond
# the right edge, a details panel that scrolls sideways.
_FIT = """
const root = document.documentElement;
const width = root.clientWidth;
const outside = [...document.querySelectorAll(
    '#tables th, #tables td, #jobs th, #jobs td, #plans th, header > *')]
  .filter(c => { const r = c.getBoundingClientRect(); return r.left < 0 || r.right > width + 0.5; })
  .map(c => c.closest('table, header').id + ': ' + c.textContent);
const details = document.getElementById('details');
return {inner: window.innerWidth, scroll: root.scrollWidth, width, outside,
        details: details.scrollWidth - details.clientWidth,
        jobs: document.querySelectorAll('#jobs tbody tr').length};
"""


@pytest.mark.parametrize("width", [1280, 1400, 1920])
def test_pipeline_fits_the_window_with_exact_ids_in_utc(
        browser: Any, client: httpx.Client, clock: ManualClock, tmp_path: Path,
        width: int) -> None:
    _seed_pipeline(client, clock)
    browser.set_window_size(width, 1000)
    browser.get(f"{client.base_url}/ui")
    _wait(browser, "return document.body.dataset.ready === 'true'")
    assert browser.execute_script("return new Date().getTimezoneOffset()") == -345  # not UTC

    barriers = client.get("/tables/lake/sales/orders/barriers").json()["barriers"]
    exact = [str(b["snapshot_id"]) for b in barriers]
    assert all(int(i) > 2 ** 53 for i in exact)
    browser.execute_script("window.metaservice.select('table:lake.sales.orders')")
    _wait(browser, "return document.getElementById('details-body').textContent"
                   ".includes('report-42')")
    shown = browser.execute_script(
        "return [...document.querySelectorAll('#details-body [data-snapshot-id]')]"
        ".map(e => e.textContent);")
    # The barriers in the order of the API, then the lease's snapshot, then the protected ones.
    assert shown[:len(exact)] == exact
    assert exact[0] in shown[len(exact):]
    assert set(shown) <= {str(i) for i in range(BIG_SNAPSHOT, BIG_SNAPSHOT + 40)}

    fit = browser.execute_script(_FIT)
    assert fit["inner"] == width
    assert fit["scroll"] <= fit["width"], fit               # no sideways scroll
    assert fit["outside"] == [], fit                         # every cell of the lists visible
    assert fit["details"] <= 0, fit
    assert fit["jobs"] == len(PIPELINE)

    header = browser.execute_script("return document.querySelector('header').innerText")
    assert "times in UTC" in header
    skew = browser.execute_script(
        "const m = document.getElementById('status').textContent"
        r".match(/^updated (\d\d):(\d\d):(\d\d) UTC$/);"
        "if (!m) return null; const now = new Date();"
        "const shown = 3600 * m[1] + 60 * m[2] + 1 * m[3];"
        "const utc = 3600 * now.getUTCHours() + 60 * now.getUTCMinutes() + now.getUTCSeconds();"
        "return (utc - shown + 86400) % 86400;")
    assert skew is not None and skew < 120, skew
    # barriers as a person reads them, to the millisecond, in UTC (docs/concepts.md#barrier)
    assert browser.execute_script(
        "return [...document.querySelectorAll('#tables tbody td:nth-child(3)')]"
        r".every(td => /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC$/.test(td.textContent))")

    geometry = browser.execute_script(_GEOMETRY)
    assert geometry == {"crossed": [], "stacked": [], "empty": [], "edges": 16}

    # A job with two long source names: its details wrap inside the panel.
    browser.execute_script("window.metaservice.select('job:customer_ltv')")
    _wait(browser, "return document.getElementById('details-body').textContent"
                   ".includes('Recent barriers')")
    fit = browser.execute_script(_FIT)
    assert fit["scroll"] <= fit["width"] and fit["outside"] == [] and fit["details"] <= 0, fit
    full = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(width, full + 140)
    browser.save_screenshot(str(tmp_path / f"dashboard-{width}.png"))
    assert _console_errors(browser) == []


def test_barriers_that_are_not_wall_clock_times_show_no_lag(
        browser: Any, client: httpx.Client, clock: ManualClock) -> None:
    """The walk-through's barriers 10, 20, 30: 'now − 30 ms' is no lag, and says so."""
    clock.set(T0)
    _ok(client.post("/register/source/A/lake/db/table1"))
    _ok(client.post("/register/sink/A/lake/db/table2"))
    _ok(client.post("/tables/lake/db/table1/barriers", json={"snapshot_id": 101, "barrier": 10}))
    assert _ok(client.post("/jobs/A/start"))["barrier"] == 10
    _ok(client.post("/commit/A/lake/db/table2", json={"barrier": 10, "snapshot_id": 201}))
    _ok(client.post("/tables/lake/db/table1/barriers", json={"snapshot_id": 102, "barrier": 30}))
    _ok(client.post("/tables/lake/db/table3/barriers", json={"snapshot_id": 301, "barrier": 25}))
    _ok(client.post("/tables/lake/db/live/barriers",
                    json={"snapshot_id": 401, "barrier": T0 - 5_000}))
    assert client.get("/delay/lake/db/table1").json()["lag_ms"] == T0 - 30  # ~19,676 days

    browser.get(f"{client.base_url}/ui")
    _wait(browser, "return document.body.dataset.ready === 'true'")
    cells = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#tables tbody tr')]"
        ".map(r => [r.dataset.table, [...r.cells].map(c => c.textContent)]));")
    for table, barrier in (("table1", "30"), ("table2", "10"), ("table3", "25")):
        row = cells[f"lake.db.{table}"]
        assert row[1] == "barrier not a timestamp" and row[2] == barrier, row
    assert cells["lake.db.live"][1] == "5.0 s"
    assert not any(c[1].endswith(" d") for c in cells.values()), cells
    summary = browser.execute_script("return document.getElementById('summary').textContent")
    assert "worst lag 5.0 s (lake.db.live)" in summary, summary
    label = browser.execute_script(
        "return window.metaservice.state.cy.getElementById('table:lake.db.table1').data('label')")
    assert label == "db.table1\nbarrier not a timestamp"
    browser.execute_script("window.metaservice.select('table:lake.db.table1')")
    details = _wait(browser, "const t = document.getElementById('details-body').textContent;"
                             "return t.includes('Barriers and snapshots') && t;")
    assert "barrier not a timestamp" in details and "1970" not in details
    assert _console_errors(browser) == []


def test_answers_are_parsed_losslessly(browser: Any, client: httpx.Client) -> None:
    """Both parsers: the reviver that reads the number's source text (Chromium has it) and the
    scanner other browsers fall back on."""
    browser.get(f"{client.base_url}/ui")
    _wait(browser, "return document.body.dataset.ready === 'true'")
    assert browser.execute_script("return window.metaservice.REVIVER_SEES_SOURCE") is True
    text = (r'{"id": 8333412345678901234, "s": "x\" 9007199254740993 \\", '
            r'"list": [-9223372036854775808, 9007199254740991, 9007199254740992, 12, -3, '
            r'1.5e300, 2.5, 9007199254740993.5, 1E2, 0], "n": null, "t": true, '
            r'"nested": {"snapshot_id": 18446744073709551615}}')
    expected = {"id": "8333412345678901234", "s": 'x" 9007199254740993 \\',
                "list": ["-9223372036854775808", 9007199254740991, "9007199254740992", 12, -3,
                         1.5e300, 2.5, 9007199254740993.5, 100, 0],
                "n": None, "t": True, "nested": {"snapshot_id": "18446744073709551615"}}
    for parser in ("parseWithSource", "parseByScanning", "parseJson"):
        parsed = browser.execute_script(
            f"return window.metaservice.{parser}(arguments[0]);", text)
        assert parsed == expected, parser


def test_a_held_strong_cut_names_the_job_and_table_holding_it(
        browser: Any, client: httpx.Client, clock: ManualClock) -> None:
    """r → A → t1, then B (t1 → t2) started five minutes ago and never committed while A
    completed five more barriers: every table of the pipeline wears the badge."""
    from tests.metaservice.versions.test_held_cut import a_completes_five_more, start_b_beside_a

    start_b_beside_a(client, clock)
    a_completes_five_more(client, clock)
    browser.get(f"{client.base_url}/ui")
    _wait(browser, "return document.body.dataset.ready === 'true'")
    badges = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#tables tbody tr')]"
        ".map(r => [r.dataset.table, r.querySelector('.held')?.textContent ?? null]));")
    held = ("strong cut held by job B (lake.db.t2) for 5.0 min at barrier "
            "2026-11-18 11:06:41.000 UTC")
    assert badges == {"lake.db.r": held, "lake.db.t1": held, "lake.db.t2": held}

    browser.find_element("css selector", "#tables tr[data-table='lake.db.t1']").click()
    details = _wait(browser, "const t = document.getElementById('details-body').textContent;"
                             "return t.includes('strong cut') && t;")
    assert "held by job B (lake.db.t2) for 5.0 min" in details
    assert _console_errors(browser) == []


# -- ties, registrations refused, many tables -------------------------------------------------


def test_barriers_read_as_utc_times_and_details_give_the_integer(
        browser: Any, client: httpx.Client, clock: ManualClock) -> None:
    _seed(client, clock)
    browser.get(f"{client.base_url}/ui")
    _wait(browser, "return document.body.dataset.ready === 'true'")
    assert browser.execute_script("return window.metaservice.fmtBarrier(1764284400250)") == \
        "2025-11-27 23:00:00.250 UTC"
    browser.execute_script("window.metaservice.select('table:lake.db.r1')")
    integers = _wait(browser, "const c = [...document.querySelectorAll("
                              "'#details-body code.barrier-integer')].map(e => e.textContent);"
                              "return c.length && c;")
    assert str(T0 - 10_000) in integers


def test_a_tie_for_the_worst_lag_is_said_with_the_bottleneck_of_each_table(
        browser: Any, client: httpx.Client, clock: ManualClock) -> None:
    """Two branches equally late: the header said the first table by name and the overall
    bottleneck, first by name too, which wrote the other table."""
    clock.set(T0)
    for job, sink in (("z_writes_a", "a"), ("b_writes_b", "b")):
        _ok(client.post(f"/register/source/{job}/lake/db/root"))
        _ok(client.post(f"/register/sink/{job}/lake/db/{sink}"))
    old, new = T0 - 600_000, T0 - 10_000
    _ok(client.post("/tables/lake/db/root/barriers", json={"snapshot_id": 1, "barrier": old}))
    for i, (job, sink) in enumerate((("z_writes_a", "a"), ("b_writes_b", "b"))):
        assert _ok(client.post(f"/jobs/{job}/start"))["barrier"] == old
        _ok(client.post(f"/commit/{job}/lake/db/{sink}",
                        json={"barrier": old, "snapshot_id": 10 + i}))
    _ok(client.post("/tables/lake/db/root/barriers", json={"snapshot_id": 2, "barrier": new}))
    browser.get(f"{client.base_url}/ui")
    _wait(browser, "return document.body.dataset.ready === 'true'")
    summary = browser.execute_script("return document.getElementById('summary').dataset")
    assert summary["tie"] == "true" and summary["worst"] == "lake.db.a lake.db.b"
    text = browser.execute_script("return document.getElementById('summary').textContent")
    assert "a tie: lake.db.a, lake.db.b" in text, text
    assert "b_writes_b (of lake.db.b)" in text and "z_writes_a (of lake.db.a)" in text, text
    # the graph marks what the header names
    assert browser.execute_script("return document.body.dataset.bottleneck") == \
        "b_writes_b z_writes_a"
    assert sorted(browser.execute_script(
        "return window.metaservice.state.cy.nodes('.bottleneck').map(n => n.id());")) == \
        ["job:b_writes_b", "job:z_writes_a"]
    assert _console_errors(browser) == []


def test_a_job_refused_at_its_start_is_not_drawn(
        browser: Any, client: httpx.Client, clock: ManualClock) -> None:
    _seed(client, clock)
    # a second writer of t1 registers (accepted: planned) and is refused at its start
    _ok(client.post("/register/source/intruder/lake/db/elsewhere"))
    _ok(client.post("/register/sink/intruder/lake/db/t1"))
    assert client.post("/jobs/intruder/start").status_code == 409
    # a job closing a loop: its source is registered, its sink refused
    _ok(client.post("/register/source/loop/lake/db/t3"))
    assert client.post("/register/sink/loop/lake/db/r1").status_code == 409
    browser.get(f"{client.base_url}/ui")
    _wait(browser, "return document.body.dataset.ready === 'true'")
    ids = browser.execute_script("return window.metaservice.state.cy.nodes().map(n => n.id());")
    assert sorted(ids) == ["job:j_fast", "job:j_join", "job:j_slow", "table:lake.db.r1",
                           "table:lake.db.t1", "table:lake.db.t2", "table:lake.db.t3"]
    text = browser.execute_script("return document.getElementById('summary').textContent")
    assert "1 tables registered only" in text and "not drawn" in text, text


LONE_TABLES = 8  # with the realistic pipeline's 8: the 16 tables of a README walk-through


@pytest.mark.parametrize("width", [1400, 1024])
def test_labels_stay_legible_with_many_tables(
        browser: Any, client: httpx.Client, clock: ManualClock, tmp_path: Path,
        width: int) -> None:
    _seed_pipeline(client, clock)
    for i in range(LONE_TABLES):
        _ok(client.post(f"/tables/lake/db/walkthrough_table_{i}/barriers",
                        json={"snapshot_id": 900 + i, "barrier": T0 - 60_000 * (i + 1)}))
    browser.set_window_size(width, 1000)
    browser.get(f"{client.base_url}/ui")
    _wait(browser, "return document.body.dataset.ready === 'true'")
    counts = browser.execute_script(
        "const cy = window.metaservice.state.cy; return [cy.nodes('.table').length, cy.zoom()];")
    assert counts[0] == 16
    assert counts[1] >= 0.9, counts        # 11 px labels drawn at 10 px at least
    geometry = browser.execute_script(_GEOMETRY)
    assert geometry == {"crossed": [], "stacked": [], "empty": [], "edges": 16}
    # every label is inside the graph's panel: the panel grew rather than shrink the labels
    outside = browser.execute_script(
        "const cy = window.metaservice.state.cy; const w = cy.width(), h = cy.height();"
        "return cy.nodes().filter(n => { const b = n.renderedBoundingBox();"
        " return b.x1 < 0 || b.y1 < 0 || b.x2 > w || b.y2 > h; }).map(n => n.id());")
    assert outside == []
    fit = browser.execute_script(_FIT)
    assert fit["scroll"] <= fit["width"], fit
    full = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(width, full + 140)
    shot = tmp_path / f"dashboard-many-{width}.png"
    browser.save_screenshot(str(shot))
    keep = os.environ.get("METASERVICE_SCREENSHOTS")
    if keep:
        shutil.copy(shot, Path(keep) / shot.name)
    assert _console_errors(browser) == []


# -- names as the Iceberg REST specification has them ----------------------------------------

NESTED_TABLES = ("orders été", "totals.v2")  # in the namespace ("sales dept", "eu.west")
TRICKY_NAMES = ("lake.db.t", "lake.a.b.t", "lake.`new.db`.`ta.ble`", "lake.`a``b`.`x y`.z",
                "lake.`sales dept`.`eu.west`.`orders été`", "lake.`q?1`.`t#2`.`100%`",
                "lake.`(x)`.`it's`.`*`", "c-1.d_2.`-t`")


def test_tables_of_a_nested_namespace_are_listed_drawn_and_opened_by_their_dotted_names(
        browser: Any, client: httpx.Client, clock: ManualClock) -> None:
    """Names with spaces, dots and accents in a namespace of two levels: the dashboard reads
    the API's dotted names as metaservice_names does, reaches each table's details through its
    URL path (levels joined by %1F), and labels the graph with the name without its
    catalog."""
    from urllib.parse import unquote

    from metaservice_names import TableName, dotted, split_dotted

    clock.set(T0)
    orders, totals = (TableName.of("lake", ("sales dept", "eu.west"), t) for t in NESTED_TABLES)
    _ok(client.post(f"/register/source/sum/{orders.path}"))
    _ok(client.post(f"/register/sink/sum/{totals.path}"))
    _ok(client.post(f"/tables/{orders.path}/barriers",
                    json={"snapshot_id": 11, "barrier": T0 - 10_000}))
    assert _ok(client.post("/jobs/sum/start"))["barrier"] == T0 - 10_000
    _ok(client.post(f"/commit/sum/{totals.path}",
                    json={"barrier": T0 - 10_000, "snapshot_id": 21}))
    _ok(client.post("/leases", json={"holder": "report-été", "ttl_seconds": 3600,
                                     "snapshots": [{"table": str(totals), "snapshot_id": 21}]}))
    browser.get(f"{client.base_url}/ui")
    _wait(browser, "return document.body.dataset.ready === 'true'")

    # The page reads and writes names as the server does.
    for name in TRICKY_NAMES:
        parts = browser.execute_script("return window.metaservice.splitDotted(arguments[0]);",
                                       name)
        assert parts == split_dotted(name), name
        assert browser.execute_script("return window.metaservice.dotted(arguments[0]);",
                                      parts) == dotted(*parts) == name
        path = browser.execute_script("return window.metaservice.tablePath(arguments[0]);",
                                      name)
        assert [unquote(p) for p in path.split("/")] == \
            [unquote(p) for p in TableName.parse(name).path.split("/")], name

    rows = browser.execute_script(
        "return [...document.querySelectorAll('#tables tbody tr')].map(r => r.dataset.table);")
    assert sorted(rows) == sorted([str(orders), str(totals)])
    labels = browser.execute_script(
        "const cy = window.metaservice.state.cy; return Object.fromEntries("
        "cy.nodes('.table').map(n => [n.data('name'), n.data('label').split('\\n')[0]]));")
    assert labels == {str(orders): "`sales dept`.`eu.west`.`orders été`",
                      str(totals): "`sales dept`.`eu.west`.`totals.v2`"}

    # A table's details come from its own URLs: its delay, barriers, leases, protections.
    browser.execute_script(
        "[...document.querySelectorAll('#tables tbody tr')]"
        ".find(r => r.dataset.table === arguments[0]).click();", str(totals))
    details = _wait(browser, "const t = document.getElementById('details-body').textContent;"
                             "return t.includes('report-été') && t.includes('Protected') && t;")
    assert "not available" not in details, details
    assert "sum" in details and "21" in details
    assert browser.execute_script(
        "return document.getElementById('details-title').textContent;") == f"Table {totals}"
    assert _console_errors(browser) == []
