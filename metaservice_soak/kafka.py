"""A private Apache Kafka broker on loopback, in KRaft mode (one process is broker and
controller; no ZooKeeper): a real Kafka topic for the tests and the demo.

    with KafkaBroker(Path("/tmp/kafka")) as kafka:
        kafka.bootstrap                      # 127.0.0.1:PORT, PLAINTEXT
        kafka.create_topic("orders", partitions=2)
        kafka.kill()                         # SIGKILL; kafka.start() serves the same log again

The broker is Kafka's own (``kafka.Kafka``) from Maven Central's jars (engines/pom.xml, profile
``kafka``: ``bash engines/fetch-jars.sh kafka`` puts them in ``.cache/jars/kafka``), run by the
Java that runs Spark. Its ports are free loopback ports chosen here; a start whose port was
taken meanwhile is tried again on other ports. Its log directory is formatted once (Kafka's
``StorageTool``, a fixed cluster id per directory), so a restarted broker serves what it had.
The Python client of the tests is ``confluent-kafka`` (the ``dev`` extra).
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType

from metaservice_soak.spark_cluster import free_port, java_home

ROOT = Path(__file__).resolve().parent.parent
JARS = ROOT / ".cache" / "jars" / "kafka"


class KafkaError(RuntimeError):
    """The broker's jars are missing, or it did not start; the message carries its output."""


def kafka_jars(directory: Path = JARS) -> Path | None:
    """The directory of the broker's jars, None when they were not fetched."""
    return directory if any(directory.glob("kafka_2.13-*.jar")) else None


class KafkaBroker:
    """One KRaft broker-and-controller with its log in ``directory``."""

    def __init__(self, directory: Path, *, jars: Path = JARS, start_seconds: float = 90.0,
                 heap: str = "256m") -> None:
        self.directory = Path(directory)
        self.jars = jars
        self.start_seconds = start_seconds
        self.heap = heap
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.controller_port = 0
        self.log = self.directory / "kafka.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- the process --------------------------------------------------------------------------

    def _java(self, main: str, *args: str, **popen: object) -> subprocess.Popen[bytes]:
        java = str(Path(java_home()) / "bin" / "java")
        command = [java, f"-Xmx{self.heap}", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                   "-Djava.awt.headless=true", "-cp", f"{self.jars}/*", main, *args]
        return subprocess.Popen(command, **popen)  # type: ignore[call-overload,no-any-return]

    def _write_properties(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        properties = self.directory / "server.properties"
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (f"PLAINTEXT://127.0.0.1:{self.port},"
                          f"CONTROLLER://127.0.0.1:{self.controller_port}"),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.directory / "log"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
        }
        properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return properties

    def _format(self, properties: Path) -> None:
        """Format the log directory once; its cluster id is kept beside it."""
        marker = self.directory / "cluster-id"
        if marker.exists():
            return
        cluster_id = "-"
        while cluster_id.startswith("-"):  # as Kafka's own ids: a leading "-" reads as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        done = self._java("kafka.tools.StorageTool", "format", "-t", cluster_id,
                          "-c", str(properties), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
        output, _ = done.communicate(timeout=120)
        if done.returncode != 0:
            raise KafkaError(f"formatting Kafka's log failed: {output.decode()[-2000:]}")
        marker.write_text(cluster_id)

    def start(self) -> KafkaBroker:
        if kafka_jars(self.jars) is None:
            raise KafkaError(f"Kafka's jars are not in {self.jars} "
                             "(bash engines/fetch-jars.sh kafka)")
        for attempt in range(3):
            if not self.port or attempt:
                # a restart keeps its ports while they are free: clients keep their address
                self.port, self.controller_port = free_port(), free_port()
            properties = self._write_properties()
            self._format(properties)
            with open(self.log, "ab") as out:
                self.process = self._java("kafka.Kafka", str(properties), stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)
            if self._wait_ready():
                return self
            self.kill()
        raise KafkaError(f"Kafka did not start: {self.log_tail()}")

    def _wait_ready(self) -> bool:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.start_seconds
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            try:
                if admin.list_topics(timeout=2).brokers:
                    return True
            except Exception:  # noqa: BLE001 - not answering yet
                pass
            time.sleep(0.3)
        return False

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL the broker (its whole process group) and wait for it."""
        if self.process is None:
            return
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> None:
        """Stop the broker: SIGTERM (a controlled shutdown), SIGKILL after 20 s."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
                return
        self.process = None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    # -- topics -------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Create ``name`` (replication 1) and wait until every partition has its leader."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            topic = admin.list_topics(name, timeout=5).topics.get(name)
            if (topic is not None and topic.error is None and len(topic.partitions) == partitions
                    and all(p.leader >= 0 for p in topic.partitions.values())):
                return
            time.sleep(0.2)
        raise KafkaError(f"topic {name} has no leader for every partition")
