"""What the container image and the manifests do, run here without a container engine: the
image's commands (serve with authentication on all interfaces, its HEALTHCHECK) and the
Kubernetes manifests validated against the Kubernetes schemas. The wheel the image builds and
installs is tests/test_packaging.py's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmarks._environment import free_port

pytestmark = pytest.mark.slow  # runs the image's command as a process

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_healthcheck() -> list[str]:
    text = (ROOT / "Dockerfile").read_text()
    match = re.search(r'HEALTHCHECK[^\n]*\\\n\s*CMD (\[.*\])', text)
    assert match, "the Dockerfile has a HEALTHCHECK with an exec-form CMD"
    import json

    return json.loads(match.group(1))


def test_image_entrypoint_serves_with_authentication(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "METASERVICE_HOST": "0.0.0.0", "METASERVICE_PORT": str(port),
           "METASERVICE_AUTH": "required", "METASERVICE_ADMIN_TOKEN": "mst_bootstrap-secret",
           "METASERVICE_DATABASE_URL": f"sqlite:///{tmp_path / 'metaservice.db'}"}
    # ENTRYPOINT ["metaservice"] CMD ["serve"]
    process = subprocess.Popen([sys.executable, "-m", "metaservice", "serve"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        healthcheck = dockerfile_healthcheck()
        assert healthcheck[0] == "python"
        probe = subprocess.run([sys.executable, *healthcheck[1:]], env=env, timeout=10)
        assert probe.returncode == 0
        assert httpx.get(f"http://127.0.0.1:{port}/jobs").status_code == 401
        ok = httpx.get(f"http://127.0.0.1:{port}/jobs",
                       headers={"Authorization": "Bearer mst_bootstrap-secret"})
        assert ok.status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_kubernetes_manifests_are_valid() -> None:
    pytest.importorskip("kubernetes_validate")
    manifests = sorted((ROOT / "deploy" / "k8s").glob("*.yaml"))
    assert len(manifests) >= 4
    result = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict",
                             *map(str, manifests)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    deployment = (ROOT / "deploy" / "k8s" / "deployment.yaml").read_text()
    assert re.search(r"replicas:\s*([2-9]|\d\d)", deployment)
    assert "readinessProbe" in deployment and "livenessProbe" in deployment
