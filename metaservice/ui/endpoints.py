"""HTTP only: the dashboard page and its static assets, served from the package."""

from __future__ import annotations

import mimetypes
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse, Response

from metaservice import errors

router = APIRouter(tags=["dashboard"], include_in_schema=False)

STATIC = (Path(__file__).parent / "static").resolve()
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".md": "text/plain; charset=utf-8",
          ".LICENSE": "text/plain; charset=utf-8"}


class _NotFound(errors.MetaServiceError):
    status_code = 404
    code = "not_found"


@router.get("/ui")
def dashboard() -> Response:
    """The dashboard page. It reads the public API from the browser (with the token the
    operator types in, when authentication is on)."""
    return FileResponse(STATIC / "index.html", media_type=_TYPES[".html"],
                        headers={"Cache-Control": "no-cache",
                                 "Content-Security-Policy": _CSP})


@router.get("/ui/")
def dashboard_slash() -> Response:
    return RedirectResponse("/ui", status_code=308)


@router.get("/ui/{path:path}")
def dashboard_asset(path: str) -> Response:
    """A file under ``metaservice/ui/static`` (nothing outside it)."""
    target = (STATIC / path).resolve()
    if not target.is_relative_to(STATIC) or not target.is_file():
        raise _NotFound(f"no dashboard asset {path!r}", path=path)
    media = _TYPES.get(target.suffix) or mimetypes.guess_type(target.name)[0] or \
        "application/octet-stream"
    return FileResponse(target, media_type=media, headers={"Cache-Control": "max-age=300"})


# Everything the page loads comes from this server; no inline script. The graph library sets
# inline styles on the elements it draws, hence 'unsafe-inline' for styles (only).
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'")
