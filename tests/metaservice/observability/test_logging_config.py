"""Structured logs: event names with ids as fields, JSON on request, never a credential."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import httpx

from metaservice.logging_config import JsonFormatter, TextFormatter
from tests.conftest import free_port


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("metaservice.barriers.service", logging.INFO, __file__, 1,
                               "barrier_committed", (), None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_json_lines_carry_the_event_and_its_fields() -> None:
    line = JsonFormatter().format(_record(job="enrich", barrier=1_700_000_000_000,
                                          tables=frozenset({"lake.db.a"})))
    body = json.loads(line)
    assert body["event"] == "barrier_committed"
    assert body["logger"] == "metaservice.barriers.service" and body["level"] == "info"
    assert body["job"] == "enrich" and body["barrier"] == 1_700_000_000_000
    assert body["tables"] == ["lake.db.a"]
    assert body["ts"].endswith("Z")


def test_credentials_are_never_printed() -> None:
    record = _record(token="s3cr3t", authorization="Bearer s3cr3t", admin_token="s3cr3t",
                     job="j")
    for formatter in (JsonFormatter(), TextFormatter()):
        line = formatter.format(record)
        assert "s3cr3t" not in line
        assert "[redacted]" in line and "job" in line


def test_text_lines_append_the_fields() -> None:
    line = TextFormatter().format(_record(job="enrich", barrier=5))
    assert line.endswith("barrier_committed job=enrich barrier=5")


def test_serve_logs_json_lines(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    env = {**os.environ, "METASERVICE_LOG_FORMAT": "json",
           "METASERVICE_DATABASE_URL": f"sqlite:///{tmp_path / 'm.db'}"}
    process = subprocess.Popen([sys.executable, "-m", "metaservice", "serve", "--port", str(port)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        assert httpx.post(f"http://127.0.0.1:{port}/tables/lake/db/t/barriers",
                          json={"snapshot_id": 1, "barrier": 5}).status_code == 200
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=20)
    lines = [json.loads(line) for line in output.decode().splitlines() if line.strip()]
    events = {line["event"] for line in lines}
    assert "barrier_completed" in events
    completed = next(line for line in lines if line["event"] == "barrier_completed")
    assert completed["table"] == "lake.db.t" and completed["barrier"] == 5
    assert any(line["logger"].startswith("uvicorn") for line in lines)
