"""The README's test command is what CI runs, and it installs everything the suite needs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    setup, tests = _readme_commands()
    assert setup.endswith("&& .venv/bin/metaservice-demo") and "pytest" in tests
    run = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [line for line in run if line.strip() and not line.lstrip().startswith("#")]
    # the script's last command is the README's; what comes before only sets the stage
    assert commands[-1] == tests
    assert not any("pytest" in line or "install" in line for line in commands[:-1])


def _pytest_step(steps: list[str]) -> int:
    [index] = [i for i, step in enumerate(steps) if step.startswith(".venv/bin/python -m pytest")]
    return index


def test_the_readme_test_command_runs_the_suite_in_parallel() -> None:
    """pytest-xdist, one worker per core, a file's tests on one worker (tests/conftest.py)."""
    steps = [step.strip() for step in _readme_commands()[1].split("&&")]
    assert steps[_pytest_step(steps)].split()[3:] == ["-n", "auto", "--dist", "loadfile"]


def test_the_readme_test_command_installs_the_browser_and_haproxy() -> None:
    """Without Chromium and its driver the browser tests, without haproxy the soak's replica
    tests would skip on a new user's machine."""
    tests = _readme_commands()[1]
    steps = [step.strip() for step in tests.split("&&")]
    install = "bash .ci/install-system-packages.sh"
    assert install in steps
    assert steps.index(install) < _pytest_step(steps)
    script = (ROOT / ".ci" / "install-system-packages.sh").read_text()
    assert all(package in script
               for package in ("chromium", "chromium-driver", "haproxy", "postgresql", "maven",
                               "etcd-server", "patroni"))
    run = (ROOT / ".ci" / "run").read_text()
    assert "METASERVICE_REQUIRE_BROWSER=1" in run and "METASERVICE_REQUIRE_HAPROXY=1" in run


def test_the_readme_test_command_installs_every_engine() -> None:
    """``bash engines/install.sh`` runs before the tests, and it runs the installer of every
    engine directory (the Spark routes with Iceberg's runtime, Kafka,
    pyiceberg's suite): without one, its tests would skip on a new user's machine (under CI
    they fail: each is required in .ci/run)."""
    steps = [step.strip() for step in _readme_commands()[1].split("&&")]
    install = "bash engines/install.sh"
    assert install in steps and steps.index(install) < _pytest_step(steps)
    script = (ROOT / "engines" / "install.sh").read_text()
    listed = script.split("for installer in ", 1)[1].split(";", 1)[0].split()
    present = sorted(p.parent.name for p in (ROOT / "engines").glob("*/install.sh"))
    assert sorted(listed) == present
    assert {"spark35", "spark41", "kafka", "pyiceberg-suite"} <= set(listed)
    run = (ROOT / ".ci" / "run").read_text()
    for required in ("SPARK_JVM", "S3", "KAFKA", "PYICEBERG_SUITE"):
        assert f"METASERVICE_REQUIRE_{required}=1" in run


def test_a_disk_without_room_for_the_run_fails_it_at_once_saying_so(tmp_path: Path) -> None:
    """A full disk fails the run before any install, with the room it needs, not as pip's
    "No space left on device" minutes in. (The script runs from a copy holding nothing else, so
    a check that let it through would only fail to install.)"""
    import subprocess

    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text((ROOT / ".ci" / "run").read_text())
    run = subprocess.run(["bash", ".ci/run"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin",
                                           "CI_NEEDED_DISK_GB": str(10**9)})
    assert run.returncode == 1
    assert "a run needs about 1000000000 GB (CI_NEEDED_DISK_GB)" in run.stderr
    assert not (tmp_path / ".venv").exists()


def test_a_temporary_directory_without_room_for_the_run_fails_it_at_once_saying_so(
        tmp_path: Path) -> None:
    """Spark's and the tests' scratch goes to the temporary directory, which may be another
    filesystem than the checkout's (a tmpfs): it is checked too, and named. ``/proc`` stands
    for a full one: Linux's ``df`` gives it no room at all, on every machine."""
    import subprocess

    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text((ROOT / ".ci" / "run").read_text())
    run = subprocess.run(["bash", ".ci/run"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "TMPDIR": "/proc",
                                           "CI_NEEDED_DISK_GB": "1"})  # the checkout has 1 GB
    assert run.returncode == 1, run.stderr
    assert "ci: 0 MB free on /proc; a run needs about 1 GB (CI_NEEDED_DISK_GB)" in run.stderr
    assert not (tmp_path / ".venv").exists()
