"""The `metaservice` command as an operator uses it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmarks._environment import free_port

pytestmark = pytest.mark.slow  # every test runs the command as a process


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metaservice", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_db_upgrade_then_current(tmp_path: Path) -> None:
    """`db current` fails (1) until the database is at the newest revision."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    (tmp_path / "x.db").touch()  # an empty file: a database without the schema
    empty = run_cli("--database-url", url, "db", "current")
    assert empty.returncode == 1 and empty.stdout.startswith("(empty)"), empty
    upgraded = run_cli("--database-url", url, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    current = run_cli("--database-url", url, "db", "current")
    assert current.returncode == 0 and "up to date" in current.stdout, current


def test_db_current_in_an_empty_directory_creates_no_database(tmp_path: Path) -> None:
    """The default URL, sqlite:///metaservice.db, names a file that is not there: `db current`
    says so and fails, and leaves the directory empty (SQLite would create the file)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("METASERVICE_")}
    result = subprocess.run([sys.executable, "-m", "metaservice", "db", "current"], cwd=tmp_path,
                            env={**env, "PYTHONPATH": str(Path(__file__).parents[2])},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result
    assert result.stdout == (f"(no database) {tmp_path / 'metaservice.db'} does not exist: "
                             "`metaservice db upgrade` or `metaservice serve` creates it\n")
    assert list(tmp_path.iterdir()) == []


def test_unreachable_database_is_one_clear_line() -> None:
    result = run_cli("--database-url", "postgresql+psycopg://nobody@127.0.0.1:1/x", "db",
                     "upgrade")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unreachable" in lines[0] and "Traceback" not in result.stderr


def test_bad_database_url_is_one_clear_line() -> None:
    result = run_cli("db", "upgrade", env={"METASERVICE_DATABASE_URL": "mysql://x/y"})
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "unsupported database URL" in result.stderr


def test_serve_migrates_and_becomes_ready(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "METASERVICE_DATABASE_URL": f"sqlite:///{tmp_path / 's.db'}"}
    process = subprocess.Popen([sys.executable, "-m", "metaservice", "serve", "--port", str(port)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.1)
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").json() == {"status": "ok"}
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_serve_stopped_by_ctrl_c_leaves_the_database_file_alone(tmp_path: Path) -> None:
    """SQLite's -wal and -shm files go when the server stops: its connections are closed."""
    port = free_port()
    env = {**os.environ, "METASERVICE_DATABASE_URL": f"sqlite:///{tmp_path / 's.db'}"}
    process = subprocess.Popen([sys.executable, "-m", "metaservice", "serve", "--port", str(port)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.1)
        assert httpx.post(f"http://127.0.0.1:{port}/register/source/j/lake/db/t").status_code \
            == 200
        assert (tmp_path / "s.db-wal").exists()  # written through the write-ahead log
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=30)
    assert code == 0  # a graceful stop
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]


def test_duckdb_opens_with_the_iceberg_extension_and_downloads_nothing(tmp_path: Path) -> None:
    """`metaservice duckdb` is DuckDB's shell; the extensions come from their packages (the
    same helper the demo and the catalog's DuckDB tests use), none from DuckDB's repository or
    its home-directory cache."""
    home = tmp_path / "home"
    home.mkdir()
    shell = run_cli("duckdb", "-csv", "-c",
                    "SELECT extension_name, loaded, installed FROM duckdb_extensions() "
                    "WHERE extension_name IN ('avro', 'httpfs', 'iceberg') ORDER BY 1",
                    env={"HOME": str(home)})
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.split() == ["extension_name,loaded,installed", "avro,true,false",
                                    "httpfs,true,false", "iceberg,true,false"]
    assert list(home.iterdir()) == []
    failed = run_cli("duckdb", "-c", "SELECT * FROM nowhere")
    assert failed.returncode == 1 and "nowhere" in failed.stderr


def test_serving_beyond_loopback_without_authentication_is_refused(tmp_path: Path) -> None:
    result = run_cli("serve", "--host", "0.0.0.0", "--port", str(free_port()),
                     env={"METASERVICE_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
                          "METASERVICE_AUTH": "disabled"})
    assert result.returncode == 2
    assert "without authentication" in result.stderr and "Traceback" not in result.stderr


def test_token_create_list_revoke(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    assert run_cli("--database-url", url, "db", "upgrade").returncode == 0
    created = run_cli("--database-url", url, "token", "create", "--role", "writer",
                      "--name", "spark-etl")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("mst_") and "shown only once" in created.stderr
    listed = run_cli("--database-url", url, "token", "list").stdout
    assert "spark-etl\twriter\tactive" in listed and token not in listed
    again = run_cli("--database-url", url, "token", "create", "--role", "reader",
                    "--name", "spark-etl")
    assert again.returncode == 2 and "exists" in again.stderr
    assert run_cli("--database-url", url, "token", "revoke", "spark-etl").returncode == 0
    assert "revoked" in run_cli("--database-url", url, "token", "list").stdout
