"""One reading of a table's name (metaservice_names; docs/contract.md#tables-and-names): the dotted
form reads back as the parts that wrote it, for any valid parts; plain names are written as they
always were; what a part may not hold is refused before it reaches storage."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metaservice_names import (
    NAME_PART_MAX,
    NAMESPACE_MAX,
    TableName,
    check_part,
    dotted,
    split_dotted,
)

# Any text a part may hold: no control character, no '/', no surrogate, no whitespace at either
# end; '.' and '..' whole are refused, a dot or a backtick inside is not.
_PART_CHARACTERS = st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/")
parts = st.text(_PART_CHARACTERS, min_size=1, max_size=12).filter(
    lambda p: p not in (".", "..") and p == p.strip())
tricky_parts = st.sampled_from(["a.b", "`", "``x`", ".x", "x.", "a b", "été", "表", "-", "_",
                                "...", "a`.`b", "a\u00a0b"])
any_part = st.one_of(parts, tricky_parts)


@given(st.lists(any_part, min_size=1, max_size=6))
def test_a_dotted_name_reads_back_as_its_parts(written: list[str]) -> None:
    assert split_dotted(dotted(*written)) == written


@given(any_part, st.lists(any_part, min_size=1, max_size=4), any_part)
def test_a_table_name_reads_back_as_itself(catalog: str, levels: list[str], table: str) -> None:
    name = TableName.of(catalog, levels, table)
    assert TableName.parse(str(name)) == name
    assert name.namespace == tuple(levels) and name.identifier == (*levels, table)
    assert pickle.loads(pickle.dumps(name)) == name  # shipped to Spark's executors


@given(st.lists(any_part, min_size=3, max_size=6), st.lists(any_part, min_size=3, max_size=6))
def test_two_names_are_one_table_only_when_their_parts_are_equal(a: list[str],
                                                                 b: list[str]) -> None:
    first, second = TableName.of(a[0], a[1:-1], a[-1]), TableName.of(b[0], b[1:-1], b[-1])
    assert (str(first) == str(second)) == (a == b)
    assert (first.path == second.path) == (a == b)


def test_plain_names_are_written_as_before() -> None:
    assert str(TableName.parse("lake.db.orders")) == "lake.db.orders"
    assert TableName.parse("lake.my-db.t_1").path == "lake/my-db/t_1"


@pytest.mark.parametrize("written, catalog, levels, table", [
    ("lake.a.b.t", "lake", ("a", "b"), "t"),
    ("lake.`new.db`.`ta.ble`", "lake", ("new.db",), "ta.ble"),
    ("lake.`TEST NS`.t", "lake", ("TEST NS",), "t"),
    ("lake.`a``b`.t", "lake", ("a`b",), "t"),
    ("lake.db.été", "lake", ("db",), "été"),  # a bare part may hold any other character
    ("lake.`db`.t", "lake", ("db",), "t"),  # quoting a plain part changes nothing
])
def test_names_as_spark_sql_writes_them(written: str, catalog: str, levels: tuple[str, ...],
                                        table: str) -> None:
    name = TableName.parse(written)
    assert (name.catalog, name.namespace, name.table) == (catalog, levels, table)


def test_the_url_path_keeps_levels_and_dots_apart() -> None:
    assert TableName.parse("lake.a.b.t").path == "lake/a%1Fb/t"
    assert TableName.parse("lake.`a.b`.t").path == "lake/a.b/t"
    assert TableName.parse("lake.`sales dept`.`été`").path == "lake/sales%20dept/%C3%A9t%C3%A9"


@pytest.mark.parametrize("written", [
    "lake.db",  # no namespace
    "lake..t",  # an empty level
    "lake.db.",  # an empty name
    "lake.`db.t",  # an unclosed backtick
    "lake.d`b.t",  # a backtick in a bare part
    "lake.`db`x.t",  # text after a closing backtick
    "lake.db.`..`",  # would leave the warehouse
    "lake.`.`.t",
    "lake.db.a/b",
    "lake.db.a\x00b",
    "lake.db.a\x1fb",  # the namespace separator
    "lake.db.a\tb",
    "lake.` db`.t",  # whitespace at either end
    "lake.db.`t\u00a0`",
    "lake.db.\udc00",  # a lone surrogate: not UTF-8
    "lake.db." + "x" * (NAME_PART_MAX + 1),
    "lake." + ".".join(["y" * 100] * 3) + ".t",  # 302 characters of namespace
])
def test_malformed_names_are_refused(written: str) -> None:
    with pytest.raises(ValueError):
        TableName.parse(written)


def test_the_bounds() -> None:
    check_part("x" * NAME_PART_MAX)
    levels = ["y" * 127, "y" * 127]  # 255 characters with the separator
    assert len(TableName.of("lake", levels, "t").database) == NAMESPACE_MAX
    with pytest.raises(ValueError):
        TableName.of("lake", [*levels[:1], "y" * 128], "t")
