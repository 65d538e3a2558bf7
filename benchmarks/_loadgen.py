"""A small, cheap HTTP/1.1 load generator: asyncio streams with keep-alive, no client library.

Throughput benchmarks compare the server with tools written in C (pgbench): a client library
such as httpx would spend more CPU than the server on the same two cores. This one writes the
request bytes and reads ``Content-Length`` bodies, nothing more, and stops at a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# (method, path, JSON body) for connection number ``client`` and its ``n``-th request.
RequestFactory = Callable[[int, int], tuple[str, str, bytes]]
# Looks at a 2xx answer's body after its latency was taken; returns why it is wrong, or None.
AnswerCheck = Callable[[bytes], str | None]


@dataclass
class LoadResult:
    seconds: float
    ok: int = 0
    failed: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    first_error: str | None = None
    warmup_requests: int = 0  # answered during the warm-up, not counted above

    @property
    def answered(self) -> int:
        """Every request answered, warm-up included: what the server's CPU time was spent on."""
        return self.ok + self.failed + self.warmup_requests

    @property
    def per_second(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


async def _connection(url: str, client: int, make: RequestFactory, check: AnswerCheck | None,
                      warmup_until: float, deadline: float, result: LoadResult,
                      headers: bytes = b"", accepted: frozenset[int] = frozenset()) -> None:
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    host = f"{parts.hostname}:{parts.port}".encode()
    n = 0
    try:
        while (now := time.monotonic()) < deadline:
            method, path, body = make(client, n)
            n += 1
            writer.write(b"%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                         b"%sContent-Length: %d\r\n\r\n%s" % (method.encode(), path.encode(),
                                                              host, headers, len(body), body))
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            payload = await reader.readexactly(length)
            if now < warmup_until:
                result.warmup_requests += 1
                continue
            elapsed_ms = (time.monotonic() - now) * 1000
            result.statuses[status] = result.statuses.get(status, 0) + 1
            wrong = (f"{status} {payload[:300].decode(errors='replace')}"
                     if not (200 <= status < 300 or status in accepted)
                     else check(payload) if check else None)
            if wrong is None:
                result.ok += 1
                result.latencies_ms.append(elapsed_ms)
            else:
                result.failed += 1
                if result.first_error is None:
                    result.first_error = wrong
    finally:
        writer.close()


async def _run(urls: list[str], clients: int, make: RequestFactory, check: AnswerCheck | None,
               warmup: float, duration: float, headers: bytes = b"",
               accepted: frozenset[int] = frozenset()) -> LoadResult:
    start = time.monotonic()
    result = LoadResult(seconds=duration)
    await asyncio.gather(*(
        _connection(urls[c % len(urls)], c, make, check, start + warmup,
                    start + warmup + duration, result, headers, accepted)
        for c in range(clients)))
    return result


def run_load(urls: list[str], *, clients: int, make: RequestFactory,
             check: AnswerCheck | None = None, warmup: float = 2.0,
             duration: float = 10.0) -> LoadResult:
    """``clients`` keep-alive connections spread over ``urls``, each sending its next request as
    soon as the previous answer arrived, for ``warmup + duration`` seconds; counts only answers
    to requests sent after the warm-up. A 2xx answer that ``check`` rejects counts as failed."""
    return asyncio.run(_run(urls, clients, make, check, warmup, duration))


def sequential(url: str, path: str, seconds: float, *, method: str = "GET", body: bytes = b"",
               warmup: float = 1.0, headers: dict[str, str] | None = None,
               accepted: frozenset[int] = frozenset()) -> LoadResult:
    """One keep-alive connection asking ``path`` one request after the other for ``seconds``
    after a warm-up: the latency a single client sees. Raises if any answer is neither 2xx nor
    in ``accepted`` (``{304}`` for conditional loads)."""
    head = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in (headers or {}).items())
    result = asyncio.run(_run([url], 1, lambda _client, _n: (method, path, body), None, warmup,
                              seconds, head, accepted))
    if result.failed or not result.ok:
        raise RuntimeError(f"{method} {path}: {result.failed} failed, first: "
                           f"{result.first_error}")
    return result
