"""The README's three lines send a pipeline's lineage to an OpenLineage receiver, as written
(the receiver's address for Marquez's)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmarks._environment import free_port
from tests.metaservice.lineage.openlineage_checks import Receiver
from tests.test_readme import README, code_blocks, sections

pytestmark = pytest.mark.slow  # the README's `metaservice serve`, a process

MARQUEZ = "http://marquez:5000"


def test_the_readme_lines_send_lineage_to_a_receiver(tmp_path: Path) -> None:
    [block] = code_blocks(sections(README.read_text())["Lineage in Marquez (OpenLineage)"],
                          ("bash",))
    lines = block.strip().splitlines()
    assert len(lines) == 3 and MARQUEZ in lines[0] and lines[2] == ".venv/bin/metaservice serve"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENLINEAGE")}
    env.update({"METASERVICE_PORT": str(port), "METASERVICE_LOG_LEVEL": "warning",
                "METASERVICE_DATABASE_URL": f"sqlite:///{tmp_path / 'm.db'}",
                "METASERVICE_WAREHOUSE": str(tmp_path / "warehouse"),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"})
    with Receiver() as receiver:
        script = block.replace(MARQUEZ, receiver.url).replace(
            ".venv/bin/", f"{Path(sys.executable).parent}/")  # this checkout's virtualenv
        process = subprocess.Popen(["bash", "-c", script],
                                   env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
            answer = httpx.post(f"{url}/tables/lake/db/events/barriers",
                                json={"snapshot_id": 7, "barrier": 1000})
            assert answer.status_code == 200, answer.text
            while not receiver.events and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            os.killpg(process.pid, 15)
            process.wait(timeout=20)
    [event] = receiver.events
    assert event["eventType"] == "COMPLETE"
    assert event["job"] == {**event["job"], "namespace": "pipelines",
                            "name": "lake.db.events@ingestion"}
    assert event["outputs"][0]["facets"]["version"]["datasetVersion"] == "7"
