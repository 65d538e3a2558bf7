"""The Spark 4.1 route of the catalog tests: Apache Iceberg's own Spark 4.1 runtime in
``.venv-spark41`` (pyspark 4.1.1, set up by ``engines/spark41/install.sh``), driven by the same
one-command-at-a-time driver as the Spark 3.5 route (``tests/engines/spark35``), in local mode
or on a standalone cluster of that same Spark (``spark41_standalone``)."""

from __future__ import annotations

from pathlib import Path

from metaservice_soak.spark_cluster import DRIVER_SETTINGS, StandaloneCluster
from tests.conftest import missing
from tests.engines.spark35.rig import SparkDriver

ROOT = Path(__file__).resolve().parents[3]
PYTHON = ROOT / ".venv-spark41" / "bin" / "python"
JAR_DIRECTORY = ROOT / ".cache" / "jars" / "spark41"
RUNTIME = JAR_DIRECTORY / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
"""Apache Iceberg's Spark 4.1 runtime (engines/pom.xml, profile spark41). The route's other
jars (S3FileIO, hadoop-aws, Kafka's source) are for object storage and Kafka: a session on a
local warehouse needs the runtime alone."""
INSTALL = "engines/spark41/install.sh"
AWS_BUNDLE = JAR_DIRECTORY / "iceberg-aws-bundle-1.12.0.jar"
"""S3FileIO and the AWS SDK it needs: with the runtime, tables on s3:// with the catalog's
vended credentials (benchmarks/plugin_s3.py)."""


def spark41_home() -> Path:
    """The route's pyspark package directory: a Spark distribution (``bin/spark-class``,
    ``jars/``) whose daemons run Spark 4.1.1, as the route's driver does."""
    found = sorted((ROOT / ".venv-spark41" / "lib").glob("python3*/site-packages/pyspark"))
    if not found or not (found[-1] / "bin" / "spark-class").exists():
        missing(f".venv-spark41 has no pyspark (set it up with: bash {INSTALL})",
                required_by="METASERVICE_REQUIRE_SPARK_JVM")
    return found[-1]


def spark41_standalone(workers: int = 2) -> StandaloneCluster:
    """A standalone cluster of the route's Spark, not started: ``workers`` workers of one core
    and 512 MiB each (one executor each)."""
    return StandaloneCluster(workers=workers, cores=1, memory="512m", spark_home=spark41_home())


def spark41_driver(log: Path, *, master: str | None = None) -> SparkDriver:
    """The route's driver, in local mode, or on the cluster at ``master`` (``spark://…``):
    then with the settings of a driver on this machine (``DRIVER_SETTINGS``), and Iceberg's
    runtime travels to the executors as the session's ``spark.jars``."""
    return SparkDriver(log, python=PYTHON, jars=[RUNTIME], install=INSTALL, master=master,
                       conf=DRIVER_SETTINGS if master else None)
