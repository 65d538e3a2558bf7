"""Reading many result rows by column name at the cost of a tuple.

A SQLAlchemy ``Row`` resolves each attribute by name on every access, several times the cost of
the tuple it is; on the hot reads (a version answer's table states and barrier tails, the delay
answer's aggregates) that cost more than the query. :func:`named_rows` turns each row into a
``NamedTuple`` declared beside its statement, after checking once per result that the
statement's column names are the tuple's fields, in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import Result

RowT = TypeVar("RowT", bound=NamedTuple)


def named_rows(result: Result[*tuple[Any, ...]], shape: type[RowT]) -> Iterator[RowT]:
    """The rows of ``result`` as ``shape``, whose fields must be the result's column names."""
    columns = tuple(result.keys())
    if columns != shape._fields:
        raise ValueError(f"the statement selects {columns}, not {shape._fields}")
    return map(shape._make, result)
