"""The rules every request's input obeys (pure code): text a database can store, JSON nested to
a bounded depth, and the shortcut that spares most bodies a second parse."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from metaservice.request_input import (
    MAX_JSON_DEPTH,
    document_problem,
    might_be_refused,
    parameters_problem,
)
from tests.conftest import examples

# Any code point, lone surrogates included: JSON can spell each one.
TEXT = st.text(st.characters(min_codepoint=0) | st.integers(0xD800, 0xDFFF).map(chr))
JSON = st.recursive(st.none() | st.booleans() | st.integers() | TEXT,
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(TEXT, inner, max_size=3), max_leaves=20)


def _nested(depth: int) -> Any:
    """``depth`` arrays in one another."""
    document: Any = "leaf"
    for _ in range(depth):
        document = [document]
    return document


@given(document=JSON, ascii_only=st.booleans())
@settings(max_examples=examples(300), deadline=None)
def test_a_body_that_could_be_refused_is_always_examined(document: Any, ascii_only: bool) -> None:
    body = json.dumps(document, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    if document_problem(json.loads(body)) is not None:
        assert might_be_refused(body)


def test_nul_and_lone_surrogates_are_found_in_keys_values_and_parameters() -> None:
    assert document_problem({"a": ["ok", {"b": "x\u0000"}]}).location == ("body", "a", 1, "b")
    key = document_problem({"k\ud800": 1})
    assert key.location == ("body", "k\\ud800") and "surrogate" in key.message
    assert document_problem({"pair": "\U0001f600", "text": "ünïcode"}) is None
    assert parameters_problem([("holder", "a\u0000")], "query").location == ("query", "holder")
    assert parameters_problem([("holder", "a\udfff")], "query") is not None


def test_depth_is_bounded_without_recursion() -> None:
    assert document_problem(_nested(MAX_JSON_DEPTH)) is None
    assert "nested" in document_problem(_nested(MAX_JSON_DEPTH + 1)).message
    assert document_problem(_nested(200_000)) is not None  # no RecursionError
