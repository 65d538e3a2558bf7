"""A name in a catalog URL as Iceberg's Java client writes it: each namespace level, table, view
and function name is encoded with ``java.net.URLEncoder`` (``RESTUtil.encodeString``), which
writes a space as ``+``, and Iceberg's reference server decodes it with ``URLDecoder``, which
reads ``+`` as a space. A path is otherwise percent-decoded, where ``+`` stays ``+``: the
namespace ``sales dept`` that Spark asks for as ``sales+dept`` was not found.

So in those segments, and only there, a ``+`` is a space (a ``+`` in a name is ``%2B`` from every
client: Java's ``URLEncoder`` and pyiceberg's ``quote(part, safe="")`` both write it so).
Other segments (a read session's prefix, a plan id, ``config``) are left as they are.
:class:`FormEncodedNames` rewrites the request's path before any route matches it; a path
with no ``+`` costs one ``in`` test."""

from __future__ import annotations

from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from metaservice.catalog.deps import PREFIX

_CATALOG = PREFIX.encode("ascii") + b"/v1/"
_NAMED_AFTER = frozenset({b"tables", b"views", b"functions"})


def plus_as_space(path: bytes) -> bytes | None:
    """``path`` (raw, below the app's root path) with each ``+`` of its namespace segment and
    of the table, view or function segment after it written ``%20``; ``None`` when there is
    nothing to rewrite. The namespace segment follows ``namespaces``, right after ``/v1/`` or
    after the prefix that follows it."""
    if b"+" not in path or not path.startswith(_CATALOG):
        return None
    segments = path.split(b"/")  # ['', 'iceberg', 'v1', (prefix,) 'namespaces', namespace, ...]
    at = next((k for k in (3, 4) if len(segments) > k + 1 and segments[k] == b"namespaces"),
              None)
    if at is None:
        return None
    named = [at + 1]
    if len(segments) > at + 3 and segments[at + 2] in _NAMED_AFTER:
        named.append(at + 3)
    if not any(b"+" in segments[k] for k in named):
        return None
    for k in named:
        segments[k] = segments[k].replace(b"+", b"%20")
    return b"/".join(segments)


class FormEncodedNames:
    """ASGI middleware: a request's path with :func:`plus_as_space` applied (``raw_path``
    rewritten, ``path`` decoded from it as the server decodes a path)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            if raw is not None and b"+" in raw and raw.isascii():
                root = scope.get("root_path", "").encode("ascii", "replace")
                rewritten = plus_as_space(raw[len(root):]) if raw.startswith(root) else None
                if rewritten is not None:
                    raw = root + rewritten
                    scope = {**scope, "raw_path": raw, "path": unquote(raw.decode("ascii"))}
        await self.app(scope, receive, send)
