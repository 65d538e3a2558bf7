"""Structured logs: event names with ids as fields, JSON on request, never a credential."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import httpx
import pytest

from benchmarks._environment import free_port
from metaservice.logging_config import JsonFormatter, TextFormatter


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


def test_uvicorns_colour_copy_of_the_message_is_not_a_field() -> None:
    record = _record(color_message="\x1b[1mbarrier_committed\x1b[0m", job="enrich")
    for formatter in (JsonFormatter(), TextFormatter()):
        line = formatter.format(record)
        assert "color_message" not in line and "\x1b" not in line
        assert "job" in line


def _serve_output(tmp_path, log_format: str) -> str:  # type: ignore[no-untyped-def]
    """Everything ``metaservice serve`` printed while it started and took one root report."""
    port = free_port()
    env = {**os.environ, "METASERVICE_LOG_FORMAT": log_format,
           "METASERVICE_DATABASE_URL": f"sqlite:///{tmp_path / f'{log_format}.db'}"}
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
    return output.decode()


@pytest.mark.slow  # `metaservice serve` as a process
def test_serve_logs_json_lines(tmp_path) -> None:  # type: ignore[no-untyped-def]
    output = _serve_output(tmp_path, "json")
    lines = [json.loads(line) for line in output.splitlines() if line.strip()]
    events = {line["event"] for line in lines}
    assert "barrier_completed" in events
    completed = next(line for line in lines if line["event"] == "barrier_completed")
    assert completed["table"] == "lake.db.t" and completed["barrier"] == 5
    assert any(line["logger"].startswith("uvicorn") for line in lines)
    assert not [line for line in lines if "color_message" in line]


@pytest.mark.slow  # `metaservice serve` as a process
def test_serve_logs_text_lines_without_uvicorns_colour_copy(tmp_path) -> None:  # type: ignore[no-untyped-def]
    output = _serve_output(tmp_path, "text")
    lines = [line for line in output.splitlines() if line.strip()]
    assert any(" uvicorn.error Started server process" in line for line in lines), lines
    assert any("barrier_completed" in line and "table=lake.db.t" in line for line in lines)
    assert [line for line in lines if "color_message" in line] == []
