"""Pagination of the catalog's list routes (pure): ``pageToken`` and ``pageSize`` as the
Iceberg REST specification gives them.

A page is the names after the last name of the page before, in name order (keyset pagination):
a create or a drop between two pages neither repeats nor skips a name that exists throughout.
A token is that last name, base64url-encoded so clients treat it as opaque. A request with
neither ``pageToken`` nor ``pageSize`` gets every name in one answer (``next-page-token`` null),
as the specification asks; ``pageSize`` is an upper bound whenever it is given (pyiceberg sends
it without a token on its first request), and an empty ``pageToken`` starts paging at the
default size.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from metaservice.catalog.errors import BadRequestError

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass(frozen=True)
class Page:
    """Which names a list answers: those after ``after`` (all if None), at most ``size`` (all
    if None)."""

    after: str | None = None
    size: int | None = None


EVERYTHING = Page()


def page(token: str | None, size: int | None) -> Page:
    """The page a request asks for.

    Raises:
        BadRequestError: a token this catalog did not make, or a size out of range.
    """
    if size is not None and not 1 <= size <= MAX_PAGE_SIZE:
        raise BadRequestError(f"pageSize must be between 1 and {MAX_PAGE_SIZE}")
    if token is None:
        return Page(None, size)
    if token == "":
        return Page(None, size or DEFAULT_PAGE_SIZE)
    try:
        after = base64.urlsafe_b64decode(token.encode("ascii") + b"==").decode("utf-8")
    except (UnicodeError, binascii.Error, ValueError):
        raise BadRequestError("invalid pageToken: use the next-page-token of the previous "
                              "answer") from None
    if not after or "\x00" in after:
        raise BadRequestError("invalid pageToken: use the next-page-token of the previous answer")
    return Page(after, size or DEFAULT_PAGE_SIZE)


def next_token(names: list[str], wanted: Page) -> tuple[list[str], str | None]:
    """The names of the page and the token of the next one (None at the end). ``names`` are the
    candidates in order, at most one more than the page holds."""
    if wanted.size is None or len(names) <= wanted.size:
        return names, None
    shown = names[:wanted.size]
    return shown, base64.urlsafe_b64encode(shown[-1].encode("utf-8")).decode("ascii").rstrip("=")
