"""GET /ui and its assets come from the package: no CDN, nothing outside the static folder."""

from __future__ import annotations

import httpx


def test_the_page_and_its_assets_are_served(client: httpx.Client) -> None:
    page = client.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "/ui/vendor/cytoscape.min.js" in page.text and "http" not in page.text.split(
        "<body")[0].replace("http-equiv", "")
    for path, kind in (("/ui/dashboard.js", "text/javascript"), ("/ui/dashboard.css", "text/css"),
                       ("/ui/vendor/cytoscape.min.js", "text/javascript")):
        asset = client.get(path)
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
    assert "cytoscape" in client.get("/ui/vendor/cytoscape.min.js").text[:2000].lower()


def test_nothing_outside_the_static_folder(client: httpx.Client) -> None:
    for path in ("/ui/%2e%2e/endpoints.py", "/ui/..%2fendpoints.py", "/ui/nope.js"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"
