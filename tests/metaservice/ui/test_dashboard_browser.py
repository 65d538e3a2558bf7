"""The dashboard in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
installed by ``.ci/install-browser.sh``), driven by Selenium.

The seeded pipeline has one obvious bottleneck::

    r1 ──j_fast──▶ t1 ──┐
     └───j_slow──▶ t2 ──┴──j_join──▶ t3

r1 completed barriers T0 − 600 s and T0 − 10 s; j_fast followed, j_slow did not (local lag
590 s), so t2 and t3 are 600 s behind and j_slow is the bottleneck of t3 and overall.

Missing Chromium skips these tests on a developer machine and fails them under CI.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from metaservice.clock import ManualClock

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("METASERVICE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("METASERVICE_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                  "--window-size=1400,1000")
T0 = 1_700_000_000_000


def _unavailable(message: str) -> None:
    message += " (install it with .ci/install-browser.sh)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


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
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
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
