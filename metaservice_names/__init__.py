"""Table names and job ids as MetaService reads them (docs/contract.md#tables-and-names), one
reading for the server (``metaservice.names``) and the Spark plugin (``spark_plugin._names``).
Plain, picklable values with no dependency beyond the standard library.

A table is named by its catalog, its namespace (one level or more) and its name. Each part is any
non-empty text of at most ``NAME_PART_MAX`` characters, except what would make it ambiguous or
unsafe: a control character (the namespace separator ``\\x1f`` among them), a ``/`` (a part is a
path segment of the table's default location and of every URL), a lone surrogate (not UTF-8), and
the parts ``.`` and ``..`` (they would leave the warehouse when mapped to a location). A namespace
holds at most ``NAMESPACE_MAX`` characters in all (levels and separators).

Written as one string, a name is its parts joined by dots, a part in backticks (a backtick
doubled) when it holds anything beyond letters, digits, ``_`` and ``-``: ``lake.db.t``,
``lake.a.b.t`` (namespace ``a``, ``b``), ``lake.`new.db`.`ta.ble```, as Spark SQL writes them.
Inside the server a namespace is its levels joined by the Iceberg REST specification's separator
``\\x1f`` (the URL form of ``GET …/namespaces/{namespace}``), which a part never holds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

NAME_PART_MAX = 128
NAMESPACE_MAX = 255
NAMESPACE_SEPARATOR = "\x1f"
JOB_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,200}$"
_JOB_ID = re.compile(JOB_ID_PATTERN)

_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f/\ud800-\udfff]")
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
_DOTTED_PART = re.compile(r"`((?:[^`]|``)*)`|([^.`]*)")


def check_part(value: object, what: str = "name") -> str:
    """``value`` if it is a valid name part, else ``ValueError`` saying why."""
    if not isinstance(value, str):
        raise ValueError(f"invalid {what} {value!r}: must be text")
    if not value:
        raise ValueError(f"invalid {what}: empty")
    if len(value) > NAME_PART_MAX:
        raise ValueError(f"invalid {what} {value[:40]!r}...: longer than {NAME_PART_MAX} "
                         "characters")
    if value in (".", ".."):
        raise ValueError(f"invalid {what} {value!r}: it would name a place outside the "
                         "warehouse")
    if value != value.strip():
        raise ValueError(f"invalid {what} {value!r}: begins or ends with whitespace (a "
                         "location ending so is refused, and tools trim it unseen)")
    bad = _FORBIDDEN.search(value)
    if bad is not None:
        raise ValueError(f"invalid {what} {value!r}: holds {bad.group()!r} (no control "
                         "character, '/' or lone surrogate)")
    return value


def check_namespace(levels: Sequence[str], what: str = "namespace") -> str:
    """The namespace's stored form (its levels joined by ``\\x1f``) if every level is valid,
    else ``ValueError``."""
    if isinstance(levels, str) or not levels:
        raise ValueError(f"invalid {what}: it needs one level or more")
    for level in levels:
        check_part(level, what)
    joined = NAMESPACE_SEPARATOR.join(levels)
    if len(joined) > NAMESPACE_MAX:
        raise ValueError(f"invalid {what} {dotted(*levels)[:60]!r}...: longer than "
                         f"{NAMESPACE_MAX} characters")
    return joined


def check_stored_namespace(value: object) -> str:
    """``value`` if it is a namespace's stored form (levels joined by ``\\x1f``), else
    ``ValueError``."""
    if not isinstance(value, str):
        raise ValueError(f"invalid namespace {value!r}: must be text")
    return check_namespace(value.split(NAMESPACE_SEPARATOR))


def quoted(part: str) -> str:
    """A part as a dotted name writes it: bare when plain, else in backticks."""
    return part if _PLAIN.fullmatch(part) else "`" + part.replace("`", "``") + "`"


def dotted(*parts: str) -> str:
    """Parts written as one string (``lake.`new.db`.t``); :func:`split_dotted` reads it back."""
    return ".".join(quoted(part) for part in parts)


def split_dotted(text: str) -> list[str]:
    """The parts of a dotted name, backticks undone; ``ValueError`` when it is malformed."""
    if not isinstance(text, str):
        raise ValueError(f"a name must be text, not {type(text).__name__}")
    parts: list[str] = []
    at = 0
    while True:
        match = _DOTTED_PART.match(text, at)
        assert match is not None  # the second branch matches the empty string
        quoted_part, bare = match.groups()
        parts.append(quoted_part.replace("``", "`") if quoted_part is not None else bare)
        at = match.end()
        if at == len(text):
            return parts
        if text[at] != ".":
            raise ValueError(f"malformed name {text!r}: a backtick at {at} (a part in "
                             "backticks ends before a dot; a backtick inside is doubled)")
        at += 1


def namespace_levels(namespace: str) -> tuple[str, ...]:
    """The levels of a namespace's stored form."""
    return tuple(namespace.split(NAMESPACE_SEPARATOR))


def qualified(catalog: str, namespace: str, table: str) -> str:
    """A table's dotted name from its stored parts (``str`` of its :class:`TableName`, without
    validating them again)."""
    return dotted(catalog, *namespace.split(NAMESPACE_SEPARATOR), table)


def dotted_namespace(namespace: str, *more: str) -> str:
    """A namespace's stored form (and more parts after it) written as a dotted name."""
    return dotted(*namespace_levels(namespace), *more)


@dataclass(frozen=True, order=True)
class TableName:
    """A table's name: its catalog, its namespace (``database``: the levels joined by
    ``\\x1f``) and its name; each part valid (``check_part``), case-sensitive. Written
    ``catalog.database.table``, a part in backticks when it is not plain (module docstring)."""

    catalog: str
    database: str
    table: str

    def __post_init__(self) -> None:
        check_part(self.catalog, "catalog name")
        check_stored_namespace(self.database)
        check_part(self.table, "table name")

    @classmethod
    def of(cls, catalog: str, namespace: Sequence[str], table: str) -> TableName:
        return cls(catalog, check_namespace(namespace), table)

    @classmethod
    def parse(cls, qualified: str | TableName) -> TableName:
        """Read a dotted name (a ``TableName`` is returned unchanged)."""
        if isinstance(qualified, TableName):
            return qualified
        if not isinstance(qualified, str):
            raise TypeError(f"a table name must be a str, not {type(qualified).__name__}")
        parts = split_dotted(qualified)
        if len(parts) < 3:
            raise ValueError(f"table {qualified!r} must be named catalog.database.table")
        return cls.of(parts[0], parts[1:-1], parts[-1])

    @property
    def namespace(self) -> tuple[str, ...]:
        return namespace_levels(self.database)

    @property
    def identifier(self) -> tuple[str, ...]:
        """The identifier inside the catalog, as pyiceberg takes it: the namespace's levels, then
        the name."""
        return (*self.namespace, self.table)

    @property
    def path(self) -> str:
        """The URL path form of the REST API: ``catalog/database/table``, each percent-encoded
        (the namespace's levels joined by ``%1F``)."""
        return "/".join(quote(part, safe="") for part in (self.catalog, self.database, self.table))

    def __str__(self) -> str:
        return qualified(self.catalog, self.database, self.table)


def validate_job_id(job: str) -> str:
    """``job`` if it is a valid job id (``JOB_ID_PATTERN``), else ``ValueError``."""
    if not isinstance(job, str) or not _JOB_ID.match(job):
        raise ValueError(f"invalid job id {job!r}: must match {JOB_ID_PATTERN}")
    return job
