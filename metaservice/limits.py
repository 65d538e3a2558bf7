"""Request limits: a body size cap (413) and an optional per-principal rate limit (429).

Both answer in the error shape of docs/contract.md#errors. The body cap is enforced on the declared
``Content-Length`` and again on the bytes actually received; a chunked body (no declared
length) is read up to the cap before the app sees it, so it too is refused with 413. The rate
limit is a token bucket per principal (token name, or client address when authentication is
off), kept in each server process: with N replicas the effective limit is up to N times the
setting.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


def _error_body(code: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    return json.dumps({"error": {"code": code, "message": message,
                                 "details": details or {}}}).encode()


async def send_error(send: Send, status: int, code: str, message: str,
                     details: dict[str, Any] | None = None,
                     headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = _error_body(code, message, details)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


class _BodyTooLarge(Exception):
    pass


class BodySizeLimit:
    """ASGI middleware refusing request bodies larger than ``max_bytes`` with 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunked = False
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._refuse(send)
                    return
            elif name == b"transfer-encoding":
                chunked = True
        if chunked:
            await self._buffered(scope, receive, send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _buffered(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A body of unknown length (chunked) is read up to the cap before the app sees it: an
        error raised while the framework reads the body would be rendered as 400, not 413."""
        chunks: list[bytes] = []
        received = 0
        pending: list[Message] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                pending.append(message)  # the client went away: the app learns it on reading
                break
            body = message.get("body", b"")
            received += len(body)
            if received > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        pending.insert(0, {"type": "http.request", "body": b"".join(chunks), "more_body": False})

        async def replay() -> Message:
            return pending.pop(0) if pending else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        await send_error(send, 413, "payload_too_large",
                         f"request body exceeds {self.max_bytes} bytes",
                         {"max_bytes": self.max_bytes})


class TokenBucket:
    """``rate`` requests per second with bursts of ``burst``, per key; thread-safe."""

    def __init__(self, rate: float, burst: int, clock=time.monotonic) -> None:  # type: ignore[no-untyped-def]
        self.rate, self.burst, self._clock = rate, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> tuple[bool, float]:
        """(allowed, seconds until the next token)."""
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1:
                self._buckets[key] = (tokens - 1, now)
                return True, 0.0
            self._buckets[key] = (tokens, now)
            return False, (1 - tokens) / self.rate
