"""The Spark 4.1 route of the catalog tests: Apache Iceberg's own Spark 4.1 runtime in
``.venv-spark41`` (pyspark 4.1.1, set up by ``engines/spark41/install.sh``), driven by the same
one-command-at-a-time driver as the Spark 3.5 route (``tests/engines/spark35``)."""

from __future__ import annotations

from pathlib import Path

from tests.engines.spark35.rig import SparkDriver

ROOT = Path(__file__).resolve().parents[3]
PYTHON = ROOT / ".venv-spark41" / "bin" / "python"
JAR_DIRECTORY = ROOT / ".cache" / "jars" / "spark41"
RUNTIME = JAR_DIRECTORY / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
"""Apache Iceberg's Spark 4.1 runtime (engines/pom.xml, profile spark41). The route's other
jars (S3FileIO, hadoop-aws, Kafka's source) are for object storage and Kafka: a session on a
local warehouse needs the runtime alone."""
AWS_BUNDLE = JAR_DIRECTORY / "iceberg-aws-bundle-1.12.0.jar"
"""S3FileIO and the AWS SDK it needs: with the runtime, tables on s3:// with the catalog's
vended credentials (benchmarks/plugin_s3.py)."""


def spark41_driver(log: Path) -> SparkDriver:
    return SparkDriver(log, python=PYTHON, jars=[RUNTIME], install="engines/spark41/install.sh")
