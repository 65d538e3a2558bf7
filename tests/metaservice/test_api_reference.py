"""The API reference (``/docs``, Swagger UI, and ``/redoc``) works with no internet: every
script, style and icon its pages load is served by the server itself, from the fastapi-offline
package, and the page renders the operations in a real headless Chromium that resolves no host
name but loopback's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.metaservice.ui.test_dashboard_browser import _console_errors, _wait, browser

__all__ = ["browser"]  # the fixture, imported


def assets(page: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]+)"', page)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_every_asset_of_the_reference_is_served_locally(client: httpx.Client, page: str) -> None:
    html = client.get(page)
    assert html.status_code == 200, html.text
    found = assets(html.text)
    assert any(a.endswith(".js") for a in found), found
    assert "//" not in "".join(found) and "cdn" not in html.text.lower(), found
    for asset in found:
        served = client.get(asset)
        assert served.status_code == 200 and len(served.content) > 1000, asset


@pytest.mark.browser
def test_the_reference_renders_offline(browser: Any, client: httpx.Client,
                                       tmp_path: Path) -> None:
    browser.get(f"{client.base_url}/docs")
    operations = _wait(browser, "const n = document.querySelectorAll('.opblock').length;"
                                "return n > 20 && n;", timeout=30)
    paths = browser.execute_script(
        "return [...document.querySelectorAll('.opblock-summary-path')].map(e => e.innerText);")
    assert "/versions" in [p.strip() for p in paths]
    assert operations > 20
    assert "MetaService" in browser.execute_script(
        "return document.querySelector('.info .title').innerText")
    screenshot = tmp_path / "docs.png"
    assert browser.save_screenshot(str(screenshot))
    assert _console_errors(browser) == []
