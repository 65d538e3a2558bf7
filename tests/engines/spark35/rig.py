"""The Spark 3.5 rig of the catalog tests, seen from pytest: a SparkSession with the stock
Apache Iceberg runtime in its own process (``driver.py`` in ``.venv-spark35``, both set up by
``install.sh``), sent one command at a time.

Missing, the rig skips its tests on a developer machine and fails them under CI (``CI`` or
``METASERVICE_REQUIRE_SPARK_JVM`` set).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from tests.conftest import missing

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
PYTHON = ROOT / ".venv-spark35" / "bin" / "python"
JAR_DIRECTORY = ROOT / ".cache" / "jars" / "spark35"
JARS = (sorted(JAR_DIRECTORY.glob("*.jar"))
        or [JAR_DIRECTORY / "iceberg-spark-runtime-3.5_2.12.jar"])  # missing: named in the error
"""Apache Iceberg's Spark 3.5 runtime, fetched by Maven (engines/fetch-jars.sh spark35)."""


def unavailable(message: str) -> NoReturn:
    missing(message + " (set it up with: bash engines/spark35/install.sh)",
            required_by="METASERVICE_REQUIRE_SPARK_JVM")


class SparkError(Exception):
    """A command the Spark side refused; ``type`` is the Python exception's class name."""

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(f"{type_}: {message}")
        self.type = type_
        self.message = message


class SparkDriver:
    """One SparkSession in a child process; each method is one command and its answer."""

    def __init__(self, log: Path, *, packages: str | None = None, python: Path = PYTHON,
                 jars: Sequence[Path] = JARS, install: str = "engines/spark35/install.sh",
                 master: str | None = None, conf: Mapping[str, str] | None = None) -> None:
        """``packages``: Maven coordinates Spark fetches itself (``spark.jars.packages``)
        instead of the jars ``install.sh`` put in place. ``python``, ``jars``, ``install``:
        another Spark route's (``tests/engines/spark41``). ``master``: the session's master
        (``local[2]`` when None), such as a standalone cluster's ``spark://…``; ``conf``: more
        settings of the session (for a cluster: its executors' memory and cores)."""
        for path in (python, *jars):
            if not path.exists():
                missing(f"{path} is missing (set it up with: bash {install})",
                        required_by="METASERVICE_REQUIRE_SPARK_JVM")
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": str(python)}
        env.pop("PYTHONPATH", None)
        env.pop("SPARK_HOME", None)
        self._log = log.open("w")
        classpath = ["--packages", packages] if packages else [str(jar) for jar in jars]
        options = ["--master", master] if master else []
        for key, value in (conf or {}).items():
            options += ["--conf", f"{key}={value}"]
        self._process = subprocess.Popen(
            [str(python), str(HERE / "driver.py"), *options, *classpath], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, text=True, env=env)
        self.pid = self._process.pid  # the driver; the JVM runs as its child
        self._catalogs = 0
        ready = self._receive()
        self.start_seconds: float = ready["start_seconds"]

    def _receive(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the Spark driver exited ({self._process.wait()}); "
                               f"see {self._log.name}")
        return json.loads(line)

    def _send(self, **command: Any) -> dict[str, Any]:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(command) + "\n")
        self._process.stdin.flush()
        answer = self._receive()
        if "error" in answer:
            raise SparkError(answer["error"]["type"], answer["error"]["message"])
        return answer

    def head_catalog(self, server_url: str) -> str:
        """A new Spark catalog (``lake<N>``) on the head of the server at ``server_url``, as
        docs/contract.md#consistent-warehouses configures it (no client cache: each test reads
        what the server answers); its name."""
        self._catalogs += 1
        name = f"lake{self._catalogs}"
        self.catalog(name, type="rest", uri=f"{server_url}/iceberg", warehouse="lake",
                     **{"cache-enabled": "false"})
        return name

    def catalog(self, name: str, **options: str) -> None:
        """Registers ``spark.sql.catalog.<name>`` as an Iceberg ``SparkCatalog``."""
        self._send(op="catalog", name=name, options=options)

    def sql(self, statement: str) -> list[list[Any]]:
        return self._send(op="sql", sql=statement)["rows"]

    def executors(self) -> dict[str, Any]:
        """The session's ``master`` and its ``executors`` (``driver`` among them), each with
        ``id``, ``host_port`` and ``tasks``: how many tasks it ran, as Spark recorded them."""
        return self._send(op="executors")

    def open_read_session(self, name: str, *, catalog: str, at: str = "strong") -> str:
        """``spark_plugin.open_read_session`` in the Spark 3.5 session."""
        return str(self._send(op="open_read_session", name=name, catalog=catalog, at=at)["name"])

    def append(self, table: str, schema: str, rows: Sequence[Sequence[Any]],
               **options: str) -> None:
        """``createDataFrame(rows, schema).writeTo(table).options(**options).append()``."""
        self._send(op="append", table=table, schema=schema, rows=rows, options=options)

    def overwrite_partitions(self, table: str, schema: str, rows: Sequence[Sequence[Any]],
                             **options: str) -> None:
        """``createDataFrame(rows, schema).writeTo(table).options(**options)
        .overwritePartitions()``."""
        self._send(op="overwrite_partitions", table=table, schema=schema, rows=rows,
                   options=options)

    def append_query(self, table: str, query: str, **options: str) -> None:
        """``spark.sql(query).writeTo(table).options(**options).append()``."""
        self._send(op="append_query", table=table, query=query, options=options)

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()
