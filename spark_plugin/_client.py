"""The synchronous HTTP client of the MetaService REST API (docs/contract.md#consistent-versions,
docs/contract.md#the-barrier-protocol, docs/contract.md#snapshot-usage-and-expiration).

Guarantees:

- Every request has explicit timeouts (connect, read, write, pool).
- A request that certainly did not reach the server (connection refused, connect timeout, no
  free connection), or that the server refused without acting on it (429, 503, and 409
  ``rollback_in_progress``: the table is fenced until a rollback plan completes), is retried
  with exponential backoff and jitter, whatever the call, waiting at least the server's
  ``Retry-After`` or ``retry_after_ms``. A request whose fate is unknown (read
  timeout, connection dropped mid-answer) is retried only when the call is idempotent on the
  server (registrations, start, next, commit, unregister, reads, explicit-barrier root reports);
  so is a ``concurrent_update`` conflict (a compare-and-swap the server lost and did not apply).
- Every error answer is raised as the exception class for its ``code`` (``_errors.py``).
- The bearer token is sent on every request and never logged or shown in ``repr``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import httpx

from spark_plugin._errors import (
    APIError,
    ConcurrentUpdateError,
    RateLimitedError,
    RollbackInProgressError,
    ServiceUnavailableError,
    TransportError,
    UnknownLeaseError,
    error_from_response,
)
from spark_plugin._models import Commit, JobRegistration, Lease, Position, TableVersion, Versions
from spark_plugin._names import TableName, validate_job_id

logger = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:8000"
"""Where ``metaservice serve`` listens by default; used when no URL is given and
``$METASERVICE_URL`` is unset."""

DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=30.0, write=30.0, pool=5.0)
"""Timeouts used when none are given: 5 s to connect or get a pooled connection, 30 s per read
or write. Server calls are short transactions; a read of 30 s means the server is in trouble."""

# The request certainly did not reach the server: safe to repeat for any call.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# The server did not act on the request: safe to repeat for any call.
_REFUSED_WITHOUT_EFFECT = (RateLimitedError, ServiceUnavailableError, RollbackInProgressError)

TableLike = str | TableName


class MetaServiceClient:
    """Client of one MetaService server.

    Args:
        base_url: the server, e.g. ``"http://127.0.0.1:8000"``; default ``$METASERVICE_URL``,
            else :data:`DEFAULT_URL` (``http://127.0.0.1:8000``).
        token: a bearer token; default ``$METASERVICE_TOKEN`` (none when unset or empty).
        timeout: an ``httpx.Timeout`` or seconds for every phase.
        max_retries: repetitions after the first attempt for retryable failures.
        backoff_seconds: first backoff; doubles per attempt, with jitter, up to
            ``max_backoff_seconds`` (a server ``Retry-After`` is honoured up to that cap).
        transport: an ``httpx.BaseTransport`` (tests use ``httpx.MockTransport``).
        headers: extra headers sent with every request.

    The client is thread-safe (one ``httpx.Client`` with a connection pool) and a context
    manager; ``close()`` releases the connections.
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        max_retries: int = 3,
        backoff_seconds: float = 0.2,
        max_backoff_seconds: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        base_url = base_url or os.environ.get("METASERVICE_URL") or DEFAULT_URL
        if token is None:
            token = os.environ.get("METASERVICE_TOKEN") or None
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.base_url = base_url.rstrip("/")
        self._token = token or None  # for MetaService's built-in Iceberg catalog; never shown
        self.max_retries = max_retries
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self._sleep = sleep
        all_headers = {"Accept": "application/json", "User-Agent": "metaservice-spark-plugin"}
        all_headers.update(headers or {})
        if token:
            all_headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport,
                                  headers=all_headers)

    def __repr__(self) -> str:
        return f"MetaServiceClient({self.base_url!r})"

    def __enter__(self) -> MetaServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- the wire --------------------------------------------------------------------------

    def request(self, method: str, path: str, *, json: Any = None,
                params: Mapping[str, Any] | None = None, idempotent: bool) -> Any:
        """Send one API call with the retry rules of this module; return the decoded JSON.

        Raises:
            APIError: (a subclass for the answer's code) when the server answered an error.
            TransportError: when no usable answer came after the allowed retries.
        """
        attempt = 0
        while True:
            try:
                response = self._http.request(method, path, json=json, params=params)
            except httpx.TransportError as exc:
                retryable = isinstance(exc, _NOT_SENT) or idempotent
                if retryable and attempt < self.max_retries:
                    self._backoff(attempt, None, method, path, type(exc).__name__)
                    attempt += 1
                    continue
                raise TransportError(
                    f"{method} {self.base_url}{path}: {type(exc).__name__}: {exc}"
                    + ("" if retryable else " (not repeated: the call is not idempotent)")
                    + (self._unreachable_hint() if isinstance(exc, httpx.ConnectError) else "")
                ) from exc
            if response.is_success:
                if response.status_code == 204 or not response.content:
                    return None
                try:
                    return response.json()
                except ValueError as exc:
                    raise TransportError(
                        f"{method} {self.base_url}{path}: the answer is not JSON") from exc
            error = self._error(response)
            retryable = isinstance(error, _REFUSED_WITHOUT_EFFECT) or (
                idempotent and isinstance(error, ConcurrentUpdateError))
            if retryable and attempt < self.max_retries:
                self._backoff(attempt, _retry_after_seconds(response, error), method, path,
                              error.code)
                attempt += 1
                continue
            raise error

    def _unreachable_hint(self) -> str:
        source = ("$METASERVICE_URL" if os.environ.get("METASERVICE_URL") == self.base_url
                  else "the client's base_url")
        return (f"; no MetaService server answers at {self.base_url} ({source}): start one "
                "with `metaservice serve`, or set METASERVICE_URL to the address of one that "
                "runs")

    @staticmethod
    def _error(response: httpx.Response) -> APIError:
        try:
            body = response.json()
        except ValueError:
            body = None
        return error_from_response(response.status_code, body, response.text)

    def _backoff(self, attempt: int, server_hint: float | None, method: str, path: str,
                 why: str) -> None:
        delay = min(self.max_backoff_seconds, self.backoff_seconds * (2 ** attempt))
        delay = delay / 2 + random.uniform(0, delay / 2)
        if server_hint is not None:
            delay = min(self.max_backoff_seconds, max(delay, server_hint))
        logger.info("metaservice_retry", extra={"method": method, "path": path, "reason": why,
                                                "attempt": attempt + 1, "delay_s": delay})
        self._sleep(delay)

    # -- health ------------------------------------------------------------------------------

    def healthz(self) -> dict[str, Any]:
        return self.request("GET", "/healthz", idempotent=True) or {}

    def readyz(self) -> dict[str, Any]:
        return self.request("GET", "/readyz", idempotent=True) or {}

    # -- plan, start, stop (docs/contract.md#plan, docs/contract.md#start, docs/contract.md#stop)
    # ---------------------------------------------

    def register_source(self, job: str, table: TableLike) -> JobRegistration:
        """Plan: ``job`` reads ``table``. Idempotent."""
        return self._register("source", job, table)

    def register_sink(self, job: str, table: TableLike) -> JobRegistration:
        """Plan: ``job`` writes ``table``. Idempotent."""
        return self._register("sink", job, table)

    def _register(self, role: str, job: str, table: TableLike) -> JobRegistration:
        path = f"/register/{role}/{validate_job_id(job)}/{TableName.parse(table).path}"
        return JobRegistration.from_json(self.request("POST", path, idempotent=True))

    def start_job(self, job: str, start_from: str | int | None = None) -> Position:
        """Start ``job`` from ``start_from`` (``"resume"``, ``"latest"``, ``"earliest"`` or a
        barrier; ``None``: the service's default, docs/contract.md#start); its pinned start
        position.

        Starting a running job again answers its pinned position (idempotent).
        """
        body: dict[str, Any] = {} if start_from is None else {"from": start_from}
        return Position.from_json(
            self.request("POST", f"/jobs/{validate_job_id(job)}/start", json=body,
                         idempotent=True))

    def unregister(self, job: str) -> JobRegistration:
        """The job terminated. Idempotent."""
        return JobRegistration.from_json(
            self.request("POST", f"/unregister/{validate_job_id(job)}", idempotent=True))

    def get_job(self, job: str) -> dict[str, Any]:
        return self.request("GET", f"/jobs/{validate_job_id(job)}", idempotent=True)

    # -- barriers (docs/contract.md#next, docs/contract.md#commit, docs/contract.md#abort) ---------

    def next_barrier(self, job: str, after: int | None) -> Position:
        """wait, process or abort. A process answer stays pinned until commit or abort."""
        return Position.from_json(
            self.request("POST", f"/jobs/{validate_job_id(job)}/barriers/next",
                         json={"after": after}, idempotent=True))

    def commit(self, job: str, table: TableLike, snapshot_id: int,
               barrier: int | None) -> Commit:
        """Report that ``snapshot_id`` of sink ``table`` completes ``barrier``.

        Exact repeats answer as the first did, so a lost answer is safely repeated; without a
        barrier (jobs without sources) the server assigns one and the call is not repeated.
        """
        body: dict[str, Any] = {"snapshot_id": int(snapshot_id)}
        if barrier is not None:
            body["barrier"] = int(barrier)
        path = f"/commit/{validate_job_id(job)}/{TableName.parse(table).path}"
        return Commit.from_json(
            self.request("POST", path, json=body, idempotent=barrier is not None))

    def abort_barrier(self, job: str, barrier: int, reason: str = "") -> dict[str, Any]:
        """Give back the pinned ``barrier``; it will be handed out again."""
        return self.request("POST", f"/jobs/{validate_job_id(job)}/barriers/{int(barrier)}/abort",
                            json={"reason": reason[:500]}, idempotent=True)

    def report_root_barrier(self, table: TableLike, snapshot_id: int,
                            barrier: int | None = None) -> Commit:
        """Root ingestion: ``snapshot_id`` completes ``barrier`` (default: assigned by the
        server as ``max(now_ms, latest + 1)``). The latest snapshot again is a heartbeat."""
        body: dict[str, Any] = {"snapshot_id": int(snapshot_id)}
        if barrier is not None:
            body["barrier"] = int(barrier)
        return Commit.from_json(
            self.request("POST", f"/tables/{TableName.parse(table).path}/barriers", json=body,
                         idempotent=barrier is not None))

    def table_barriers(self, table: TableLike, *, limit: int = 100,
                       before: int | None = None) -> dict[str, Any]:
        """Completed barriers of one table, newest first."""
        params: dict[str, Any] = {"limit": limit}
        if before is not None:
            params["before"] = before
        return self.request("GET", f"/tables/{TableName.parse(table).path}/barriers",
                            params=params, idempotent=True)

    # -- versions and leases (docs/contract.md#consistent-versions, docs/contract.md#leases) -------

    def get_version(self, table: TableLike, consistency: str = "strong") -> TableVersion:
        data = self.request("GET", f"/version/{consistency}/{TableName.parse(table).path}",
                            idempotent=True)
        return TableVersion(str(data["table"]), int(data["barrier"]), int(data["snapshot_id"]))

    def get_versions(self, tables: Iterable[TableLike], consistency: str = "strong", *,
                     barrier: int | None = None, lease_seconds: float | None = None,
                     holder: str | None = None) -> Versions:
        """Versions of many tables; with ``lease_seconds`` they are leased in the same
        transaction (then the call creates a lease and is not repeated on an unknown fate)."""
        body: dict[str, Any] = {"consistency": consistency,
                                "tables": [str(TableName.parse(t)) for t in tables]}
        if barrier is not None:
            body["barrier"] = int(barrier)
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        if holder is not None:
            body["holder"] = holder
        return Versions.from_json(self.request("POST", "/versions", json=body,
                                               idempotent=lease_seconds is None))

    def create_lease(self, holder: str, ttl_seconds: float,
                     snapshots: Mapping[str, int]) -> Lease:
        body = {"holder": holder, "ttl_seconds": ttl_seconds,
                "snapshots": [{"table": str(TableName.parse(t)), "snapshot_id": int(s)}
                              for t, s in snapshots.items()]}
        return Lease.from_json(self.request("POST", "/leases", json=body, idempotent=False))

    def renew_lease(self, lease_id: str, ttl_seconds: float | None = None) -> dict[str, Any]:
        body = {} if ttl_seconds is None else {"ttl_seconds": ttl_seconds}
        return self.request("POST", f"/leases/{lease_id}/renew", json=body, idempotent=True)

    def release_lease(self, lease_id: str, *, missing_ok: bool = True) -> None:
        """Release a lease. With ``missing_ok`` an unknown (expired, already released) lease is
        not an error, so a repeated release after a lost answer succeeds."""
        try:
            self.request("DELETE", f"/leases/{lease_id}", idempotent=True)
        except UnknownLeaseError:
            if not missing_ok:
                raise

    def list_leases(self, *, table: TableLike | None = None, holder: str | None = None,
                    limit: int = 100) -> list[dict[str, Any]]:
        """The live leases of this client's token (an admin's: every one), soonest to expire
        first, optionally of one table or one holder."""
        params: dict[str, Any] = {"limit": limit}
        if table is not None:
            params["table"] = str(TableName.parse(table))
        if holder is not None:
            params["holder"] = holder
        return (self.request("GET", "/leases", params=params, idempotent=True) or {}).get(
            "leases", [])

    @contextlib.contextmanager
    def releasing_read_sessions(self, warehouse: str = "lake@strong") -> Iterator[None]:
        """Release, when the block ends, the read sessions of the consistent warehouse
        ``warehouse`` (``<catalog>@strong`` or ``<catalog>@barrier=<B>``) that this client's
        token opened in it: an engine that connects to the warehouse inside the block (a DuckDB
        ``ATTACH``, a pyiceberg ``load_catalog``) opens one (docs/contract.md#consistent-warehouses)
        and never closes it (DuckDB's ``DETACH`` tells the server nothing), so an engine that
        reconnects for every read would otherwise hold one more live session per read, until the
        token's ``METASERVICE_MAX_READ_SESSIONS`` are reached and the next connection is refused
        (429 ``too_many_read_sessions``).

        A read session is a lease whose holder is the warehouse; the block's are the token's
        leases of that holder that were not live when it began. Sessions the same token opens
        elsewhere meanwhile are among them (with an admin token, anyone's): give each reader
        its own token, or read one after the other."""
        before = self._read_session_ids(warehouse)
        try:
            yield
        finally:
            for lease_id in self._read_session_ids(warehouse) - before:
                self.release_lease(lease_id)

    def _read_session_ids(self, warehouse: str) -> set[str]:
        return {lease["lease_id"] for lease in self.list_leases(holder=warehouse, limit=1000)}

    # -- expiration (docs/contract.md#two-phase-expiration) ----------------------------------------

    def request_expiration(self, table: TableLike, snapshot_ids: Iterable[int], *,
                           approve_unknown: bool = False) -> dict[str, Any]:
        """Phase one: ask to expire snapshots of ``table``. The answer has ``expiration_id``,
        ``approved`` (never handed out or leased again from now on) and ``refused`` (each
        with its ``reason``). Safe to repeat: a later request takes over earlier approvals."""
        body = {"snapshot_ids": [int(s) for s in snapshot_ids],
                "approve_unknown": bool(approve_unknown)}
        return self.request("POST", f"/tables/{TableName.parse(table).path}/expirations",
                            json=body, idempotent=True)

    def complete_expiration(self, expiration_id: str,
                            snapshot_ids: Iterable[int]) -> dict[str, Any]:
        """Phase two: report the approved snapshots really removed from the table. Repeatable."""
        return self.request("POST", f"/expirations/{expiration_id}/complete",
                            json={"snapshot_ids": [int(s) for s in snapshot_ids]},
                            idempotent=True)

    def protected_snapshots(self, table: TableLike) -> dict[int, list[str]]:
        """``{snapshot_id: reasons}`` of the snapshots of ``table`` that may not be expired now
        (``latest``, ``strong_cut``, ``job_source:<job>``, ``lease:<id>``)."""
        data = self.request("GET", f"/tables/{TableName.parse(table).path}/snapshots/protected",
                            idempotent=True)
        return {int(s["snapshot_id"]): list(s["reasons"]) for s in data["snapshots"]}


def _retry_after_seconds(response: httpx.Response, error: APIError) -> float | None:
    header = response.headers.get("Retry-After")
    if header:
        try:
            return max(0.0, float(header))
        except ValueError:
            pass
    hint = error.details.get("retry_after_ms")
    if isinstance(hint, (int, float)):
        return max(0.0, hint / 1000)
    return None


def client_or_default(client: MetaServiceClient | None) -> MetaServiceClient:
    """``client``, or one built from ``$METASERVICE_URL`` (default :data:`DEFAULT_URL`) and
    ``$METASERVICE_TOKEN``."""
    return client if client is not None else MetaServiceClient()
