"""What every request may carry, on every route and both backends (docs/contract.md#errors,
docs/contract.md#the-built-in-catalog): text that a database can store, in JSON nested to a bounded
depth.

PostgreSQL refuses a NUL character in any text, even in a query's parameter, and no database
driver encodes a lone UTF-16 surrogate (JSON can spell both: ``\\u0000``, ``\\ud800``). A
request carrying either anywhere (path, query or body, key or value) is malformed: it is
refused before any endpoint runs, so nothing of it is stored and the answer does not depend on
the backend. Deep nesting is refused for the same reason: parsers of nested documents (Iceberg
types among them) recurse, and a deep enough document exhausts the interpreter's stack.

Pure code: ``deps.refuse_unstorable_input`` applies it to each request.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MAX_JSON_DEPTH = 128
"""Containers (objects, arrays) nested in one another in a request body, at most."""

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class InputProblem:
    location: tuple[str | int, ...]
    message: str


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored, or None."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "contains a NUL character (U+0000), which cannot be stored"
    return (f"contains a lone surrogate (U+{ord(found.group()):04X}), which is not a Unicode "
            "character")


def parameters_problem(parameters: Iterable[tuple[str, str]],
                       where: str) -> InputProblem | None:
    """The first name or value of URL parameters (``where``: path or query) that cannot be
    stored."""
    for name, value in parameters:
        for text in (name, value):
            problem = text_problem(text)
            if problem is not None:
                return InputProblem((where, _printable(name)), problem)
    return None


def might_be_refused(body: bytes) -> bool:
    """Whether a JSON body can hold anything :func:`document_problem` refuses: an escape, a
    byte outside ASCII, or enough brackets to nest too deep. Most bodies hold none and are
    not parsed a second time."""
    return (b"\\u" in body or not body.isascii()
            or body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH)


def document_problem(document: Any, where: str = "body") -> InputProblem | None:
    """The first string (key or value) of a parsed JSON document that cannot be stored, or
    its first container nested deeper than :data:`MAX_JSON_DEPTH`. Iterative: a document of
    any depth is examined without recursion."""
    pending: list[tuple[Any, tuple[str | int, ...], int]] = [(document, (where,), 0)]
    while pending:
        value, location, depth = pending.pop()
        if isinstance(value, str):
            problem = text_problem(value)
            if problem is not None:
                return InputProblem(location, problem)
        elif isinstance(value, (dict, list)):
            if depth >= MAX_JSON_DEPTH:
                return InputProblem(location, f"is nested more than {MAX_JSON_DEPTH} levels deep")
            if isinstance(value, dict):
                for key, item in value.items():
                    problem = text_problem(key) if isinstance(key, str) else None
                    if problem is not None:
                        return InputProblem((*location, _printable(key)), f"key {problem}")
                    pending.append((item, (*location, key), depth + 1))
            else:
                pending.extend((item, (*location, index), depth + 1)
                               for index, item in enumerate(value))
    return None


def _printable(text: str) -> str:
    """``text`` with what cannot be stored escaped, to name it in an error (an answer cannot
    carry a lone surrogate either)."""
    return _UNSTORABLE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
