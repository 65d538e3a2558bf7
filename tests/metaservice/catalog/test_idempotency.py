"""``Idempotency-Key`` (Iceberg REST): a mutation whose answer was lost, retried with its key,
gets the first answer and changes nothing again; through raw HTTP and pyiceberg, with the
answer really lost on the wire (a proxy closes the connection once the server has answered),
on both backends."""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Callable, Iterator

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from sqlalchemy import event

from metaservice.clock import ManualClock
from metaservice.db.session import Database
from tests.conftest import ServerThread
from tests.metaservice.catalog.conftest import rest_catalog, send_together

SCHEMA = pa.schema([pa.field("id", pa.int64())])
TABLES = "/iceberg/v1/namespaces/db/tables"


class LosingProxy:
    """A TCP proxy to the server that, once armed, lets the next POST reach the server and
    closes the client's connection instead of relaying the answer."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.armed = threading.Event()
        self.lost = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            dropping = threading.Event()
            threading.Thread(target=self._upstream, args=(client, server, dropping),
                             daemon=True).start()
            threading.Thread(target=self._downstream, args=(server, client, dropping),
                             daemon=True).start()

    def _upstream(self, client: socket.socket, server: socket.socket,
                  dropping: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                if data.startswith(b"POST ") and self.armed.is_set():
                    self.armed.clear()
                    dropping.set()
                server.sendall(data)
        except OSError:
            pass

    def _downstream(self, server: socket.socket, client: socket.socket,
                    dropping: threading.Event) -> None:
        try:
            while data := server.recv(65536):
                if dropping.is_set():  # the server answered: the client never hears it
                    self.lost.set()
                    break
                client.sendall(data)
        except OSError:
            pass
        for end in (client, server):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def proxy(server: ServerThread) -> Iterator[LosingProxy]:
    losing = LosingProxy(int(server.url.rsplit(":", 1)[1]))
    yield losing
    losing.close()


def append_body(client: httpx.Client, table: str, snapshot_id: int) -> dict[str, object]:
    """A raw commit appending an empty snapshot on top of the current head."""
    metadata = client.get(f"{TABLES}/{table}").json()["metadata"]
    head = metadata.get("current-snapshot-id")
    snapshot = {"snapshot-id": snapshot_id, "sequence-number": metadata["last-sequence-number"] + 1,
                "timestamp-ms": metadata["last-updated-ms"] + 1,
                "manifest-list": f"{metadata['location']}/metadata/snap-{snapshot_id}.avro",
                "summary": {"operation": "append"}, "schema-id": 0}
    if head is not None:
        snapshot["parent-snapshot-id"] = head
    return {"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main",
                              "snapshot-id": head}],
            "updates": [{"action": "add-snapshot", "snapshot": snapshot},
                        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                         "snapshot-id": snapshot_id}]}


def test_config_advertises_the_key_lifetime(client: httpx.Client) -> None:
    assert client.get("/iceberg/v1/config").json()["idempotency-key-lifetime"] == "PT1800S"


def test_a_raw_commit_whose_answer_was_lost_is_answered_again_not_run_again(
        catalog: RestCatalog, client: httpx.Client, proxy: LosingProxy,
        clock: ManualClock) -> None:
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA)
    key = str(uuid.uuid4())
    body = append_body(client, "t", 1001)
    proxy.armed.set()
    with httpx.Client(base_url=proxy.url, timeout=10) as lossy, pytest.raises(httpx.HTTPError):
        lossy.post(f"{TABLES}/t", json=body, headers={"Idempotency-Key": key})
    assert proxy.lost.is_set()
    committed = client.get(f"{TABLES}/t").json()
    assert committed["metadata"]["current-snapshot-id"] == 1001  # it did land

    retry = client.post(f"{TABLES}/t", json=body, headers={"Idempotency-Key": key})
    assert retry.status_code == 200, retry.text  # not a 409: the requirement no longer holds
    assert retry.json()["metadata-location"] == committed["metadata-location"]
    assert retry.headers["ETag"] == client.get(f"{TABLES}/t").headers["ETag"]
    # The same key with another body is another request: refused, and nothing changes.
    other = client.post(f"{TABLES}/t", json=append_body(client, "t", 1002),
                        headers={"Idempotency-Key": key})
    assert other.status_code == 422, other.text
    assert "idempotency_key_reused" in other.json()["error"]["message"]
    assert [s["snapshot-id"] for s in client.get(f"{TABLES}/t").json()["metadata"][
        "snapshots"]] == [1001]
    # Another operation with the key is refused; an expired key runs anew.
    reused = client.delete(f"{TABLES}/t", headers={"Idempotency-Key": key})
    assert reused.status_code == 422, reused.text
    clock.advance(1_801_000)
    fresh = client.post(f"{TABLES}/t", json=append_body(client, "t", 1003),
                        headers={"Idempotency-Key": key})
    assert fresh.status_code == 200
    assert fresh.json()["metadata"]["current-snapshot-id"] == 1003


def test_pyiceberg_appending_again_with_a_lost_appends_key_lands_it_once(
        server: ServerThread, client: httpx.Client, proxy: LosingProxy) -> None:
    """pyiceberg sends no key of its own; given one as a header, an append done again after
    its answer was lost is a new request (a new snapshot): refused (422), never a second
    append."""
    rest_catalog(server.url).create_namespace("db")
    rest_catalog(server.url).create_table("db.t", schema=SCHEMA)
    key = {"header.Idempotency-Key": str(uuid.uuid4())}
    lossy = rest_catalog(proxy.url, **key)
    table = lossy.load_table("db.t")
    proxy.armed.set()
    with pytest.raises(Exception):  # noqa: B017 - the connection is closed under the client
        table.append(pa.table({"id": [1, 2]}, schema=SCHEMA))
    assert proxy.lost.is_set()
    again = rest_catalog(server.url, **key).load_table("db.t")
    with pytest.raises(Exception, match="idempotency_key_reused"):
        again.append(pa.table({"id": [1, 2]}, schema=SCHEMA))
    landed = rest_catalog(server.url).load_table("db.t")
    assert len(landed.snapshots()) == 1
    assert sorted(landed.scan().to_arrow()["id"].to_pylist()) == [1, 2]


def test_create_drop_and_rename_replay_and_final_refusals_are_kept(
        catalog: RestCatalog, client: httpx.Client) -> None:
    catalog.create_namespace("db")
    schema = {"type": "struct", "schema-id": 0,
              "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    key = {"Idempotency-Key": str(uuid.uuid4())}
    first = client.post(TABLES, json={"name": "a", "schema": schema}, headers=key)
    again = client.post(TABLES, json={"name": "a", "schema": schema}, headers=key)
    assert first.status_code == again.status_code == 200  # not "already exists"
    assert first.json()["metadata-location"] == again.json()["metadata-location"]
    rename = {"source": {"namespace": ["db"], "name": "a"},
              "destination": {"namespace": ["db"], "name": "b"}}
    key = {"Idempotency-Key": str(uuid.uuid4())}
    assert client.post("/iceberg/v1/tables/rename", json=rename, headers=key).status_code == 204
    assert client.post("/iceberg/v1/tables/rename", json=rename, headers=key).status_code == 204
    key = {"Idempotency-Key": str(uuid.uuid4())}
    assert client.delete(f"{TABLES}/b", headers=key).status_code == 204
    assert client.delete(f"{TABLES}/b", headers=key).status_code == 204
    # A final refusal is answered again, even once its cause is gone.
    key = {"Idempotency-Key": str(uuid.uuid4())}
    missing = client.delete(f"{TABLES}/c", headers=key)
    assert missing.status_code == 404
    catalog.create_table("db.c", schema=SCHEMA)
    assert client.delete(f"{TABLES}/c", headers=key).status_code == 404
    assert catalog.table_exists("db.c")
    bad = client.delete(f"{TABLES}/c", headers={"Idempotency-Key": "not-a-uuid"})
    assert bad.status_code == 400


def test_two_requests_racing_with_one_key_change_the_table_once(
        catalog: RestCatalog, client: httpx.Client, server: ServerThread) -> None:
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA)
    for round_ in range(5):
        key = {"Idempotency-Key": str(uuid.uuid4())}
        body = append_body(client, "t", 2000 + round_)
        answers = send_together(server.url, [(f"{TABLES}/t", body)] * 2, key)
        assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
        assert answers[0].json()["metadata-location"] == answers[1].json()["metadata-location"]
    snapshots = client.get(f"{TABLES}/t").json()["metadata"]["snapshots"]
    assert len(snapshots) == 5


def test_a_key_reused_for_another_table_is_refused_and_changes_nothing(
        catalog: RestCatalog, client: httpx.Client) -> None:
    """A key answers only the request it was used for: the same commit to another table is
    422 (not the first table's metadata), and the second table is left unchanged; so are
    another route and another query with the key."""
    catalog.create_namespace("db")
    catalog.create_table("db.a", schema=SCHEMA)
    catalog.create_table("db.b", schema=SCHEMA)
    key = {"Idempotency-Key": str(uuid.uuid4())}
    body = append_body(client, "a", 3001)
    first = client.post(f"{TABLES}/a", json=body, headers=key)
    assert first.status_code == 200, first.text
    before = client.get(f"{TABLES}/b").json()
    reused = client.post(f"{TABLES}/b", json=append_body(client, "b", 3001), headers=key)
    assert reused.status_code == 422, reused.text
    error = reused.json()["error"]
    assert error["type"] == "UnprocessableEntityException" and error["code"] == 422
    assert "idempotency_key_reused" in error["message"] and "/tables/a" in error["message"]
    assert client.get(f"{TABLES}/b").json()["metadata-location"] == before["metadata-location"]
    # The first request sent again is still answered with its outcome.
    again = client.post(f"{TABLES}/a", json=body, headers=key)
    assert again.status_code == 200, again.text
    assert again.json()["metadata-location"] == first.json()["metadata-location"]
    # A drop: another purge flag with the same key is another request too.
    key = {"Idempotency-Key": str(uuid.uuid4())}
    assert client.delete(f"{TABLES}/b", headers=key).status_code == 204
    catalog.create_table("db.b", schema=SCHEMA)
    purge = client.delete(f"{TABLES}/b", params={"purgeRequested": "true"}, headers=key)
    assert purge.status_code == 422, purge.text
    assert catalog.table_exists("db.b")
    assert client.delete(f"{TABLES}/b", headers=key).status_code == 204  # the same request


def test_a_key_racing_for_two_tables_changes_one_of_them(
        catalog: RestCatalog, client: httpx.Client, server: ServerThread) -> None:
    """Two commits to two tables sent at once with one key: one lands, the other is refused
    (422) and its table is unchanged, whichever wins."""
    catalog.create_namespace("db")
    for name in ("a", "b"):
        catalog.create_table(f"db.{name}", schema=SCHEMA)
    for round_ in range(5):
        key = {"Idempotency-Key": str(uuid.uuid4())}
        snapshot = 4000 + round_
        answers = send_together(server.url, [
            (f"{TABLES}/{name}", append_body(client, name, snapshot)) for name in ("a", "b")],
            key)
        assert sorted(a.status_code for a in answers) == [200, 422], [a.text for a in answers]
        heads = [client.get(f"{TABLES}/{name}").json()["metadata"].get("current-snapshot-id")
                 for name in ("a", "b")]
        assert sorted(h == snapshot for h in heads) == [False, True], heads
        winner = 0 if answers[0].status_code == 200 else 1
        assert heads[winner] == snapshot


class Transactions:
    """The database transactions the catalog's request threads begin (the server's own
    threads, the committer's and the lineage sender's, are not counted): each begin, and
    whether a write followed in it."""

    def __init__(self, database: Database) -> None:
        self.begun: list[str] = []
        self.engine = database.engine
        event.listen(self.engine, "begin", self._begin)
        event.listen(self.engine, "before_cursor_execute", self._statement)

    def _request_thread(self) -> bool:
        return threading.current_thread().name.startswith("AnyIO worker thread")

    def _begin(self, connection: object) -> None:
        if self._request_thread():
            self.begun.append("read")

    def _statement(self, connection: object, cursor: object, statement: str, *args: object) -> None:
        if self._request_thread() and self.begun and statement.lstrip().upper().startswith(
                ("INSERT", "UPDATE", "DELETE")):
            self.begun[-1] = "write"

    def during(self, send: Callable[[], httpx.Response]) -> tuple[httpx.Response, list[str]]:
        self.begun.clear()
        answer = send()
        return answer, list(self.begun)

    def close(self) -> None:
        event.remove(self.engine, "begin", self._begin)
        event.remove(self.engine, "before_cursor_execute", self._statement)


def test_a_keyed_commit_is_one_read_and_one_write_transaction(
        catalog: RestCatalog, client: httpx.Client, database: Database) -> None:
    """A commit with a key reads its key and its tables in one transaction and writes the key,
    the change and (for a refusal) the refusal in one more; a replay only reads."""
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA)
    client.get(f"{TABLES}/t")  # the token's principal, read once and cached
    transactions = Transactions(database)
    try:
        key = {"Idempotency-Key": str(uuid.uuid4())}
        body = append_body(client, "t", 4001)
        first, begun = transactions.during(lambda: client.post(f"{TABLES}/t", json=body,
                                                               headers=key))
        assert first.status_code == 200, first.text
        assert begun == ["read", "write"]
        again, begun = transactions.during(lambda: client.post(f"{TABLES}/t", json=body,
                                                               headers=key))
        assert again.json()["metadata-location"] == first.json()["metadata-location"]
        assert begun == ["read"]
        # A refusal in the write phase (MetaService's rules: the snapshot main names cannot go)
        # is recorded in that same transaction, its change rolled back.
        head = client.get(f"{TABLES}/t").json()["metadata"]["current-snapshot-id"]
        refused_body = {"requirements": [],
                        "updates": [{"action": "remove-snapshots", "snapshot-ids": [head]}]}
        key = {"Idempotency-Key": str(uuid.uuid4())}
        refused, begun = transactions.during(lambda: client.post(
            f"{TABLES}/t", json=refused_body, headers=key))
        assert refused.status_code == 400, refused.text  # refused by the rules, in the write
        assert "head_not_forward" in refused.json()["error"]["message"]
        assert begun == ["read", "write"]
        replayed, begun = transactions.during(lambda: client.post(
            f"{TABLES}/t", json=refused_body, headers=key))
        assert (replayed.status_code, replayed.json()) == (refused.status_code, refused.json())
        assert begun == ["read"]
    finally:
        transactions.close()
    assert client.get(f"{TABLES}/t").json()["metadata"]["current-snapshot-id"] == head
