"""DuckDB reading the catalog offline: its Iceberg extension from the installed packages.

DuckDB fetches an extension from its repository on the internet the first time a statement
needs it (``ATTACH ... (TYPE iceberg)``). The ``spark`` extra installs the extensions as PyPI
packages instead (``duckdb-extension-iceberg`` and the ``avro`` and ``httpfs`` ones it uses,
pinned to DuckDB's version), and this module loads them from there, by path, so that nothing
is downloaded and nothing is written outside the session:

    from metaservice.duckdb_offline import connect

    con = connect()  # duckdb.connect() with iceberg, avro and httpfs loaded
    con.sql("ATTACH 'lake@strong' AS strong (TYPE iceberg, "
            "ENDPOINT 'http://127.0.0.1:8000/iceberg', AUTHORIZATION_TYPE 'none')")

``metaservice duckdb`` opens DuckDB's own shell (the ``duckdb-cli`` package) loaded the same
way. The demo and the tests read the catalog through :func:`connect`.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

# Loaded in this order: iceberg reads Avro manifests and talks HTTP through the other two.
EXTENSIONS = ("httpfs", "avro", "iceberg")
INSTALL_HINT = "pip install 'metaservice[spark]'"


class ExtensionMissingError(RuntimeError):
    """An extension package (or the DuckDB shell) is not installed."""


def extension_file(name: str) -> Path:
    """The ``<name>.duckdb_extension`` file of the ``duckdb-extension-<name>`` package."""
    try:
        package = importlib.import_module(f"duckdb_extension_{name}")
    except ModuleNotFoundError:
        raise ExtensionMissingError(f"DuckDB's {name} extension is not installed "
                                    f"(duckdb-extension-{name}): {INSTALL_HINT}") from None
    found = next(Path(package.__path__[0]).rglob(f"{name}.duckdb_extension"), None)
    if found is None:
        raise ExtensionMissingError(f"duckdb-extension-{name} holds no {name}.duckdb_extension")
    return found


def load_statements() -> list[str]:
    """The statements that load the extensions into a DuckDB session, one per extension."""
    return ["LOAD '{}'".format(str(extension_file(name)).replace("'", "''"))
            for name in EXTENSIONS]


def connect(database: str = ":memory:", **kwargs: Any) -> Any:
    """``duckdb.connect(database, **kwargs)`` with the extensions loaded."""
    import duckdb

    connection = duckdb.connect(database, **kwargs)
    try:
        for statement in load_statements():
            connection.execute(statement)
    except BaseException:
        connection.close()
        raise
    return connection


def shell_command(arguments: list[str]) -> list[str]:
    """DuckDB's shell (``duckdb-cli``) with the extensions loaded before anything else runs,
    then ``arguments`` as ``duckdb`` takes them (a database file, ``-c SQL``, ...)."""
    try:
        import duckdb_cli
    except ModuleNotFoundError:
        raise ExtensionMissingError(f"DuckDB's shell is not installed (duckdb-cli): "
                                    f"{INSTALL_HINT}") from None
    binary = Path(duckdb_cli.__file__).parent / ("duckdb.exe" if sys.platform == "win32"
                                                  else "duckdb")
    if not binary.is_file():
        raise ExtensionMissingError(f"duckdb-cli holds no {binary.name} binary")
    return [str(binary), "-cmd", "; ".join(load_statements()) + ";", *arguments]


def exec_shell(arguments: list[str]) -> None:
    """Replace this process with :func:`shell_command` (its exit status is the shell's)."""
    command = shell_command(arguments)
    os.execv(command[0], command)
