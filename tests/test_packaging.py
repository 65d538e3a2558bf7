"""What ``pip install`` gives: the base install is the client and the plugin, without the server's
dependencies; the ``server`` extra serves and migrates from anywhere, installed or editable.

Each check installs the project into a new virtual environment and runs it there, from a
directory outside the repository, with ``-I`` or without ``PYTHONPATH``. The project goes in
with pip (``--no-deps``: a wheel built from what the Dockerfile copies, or ``-e``); its
dependencies are the distributions this environment already has, linked file by file, and
exactly those its metadata asks for — the base requirements, or with the ``server`` extra's —
followed transitively. ``pip check`` then proves nothing is missing, so no index is needed,
and a module that imports what the base does not declare fails as it would on a Spark
executor.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterable
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from metaservice.db.migrate import head_revision
from tests.conftest import free_port
from tests.metaservice.test_durability import ServerProcess

pytestmark = pytest.mark.slow  # builds wheels and virtualenvs, starts the server as a process

ROOT = Path(__file__).resolve().parent.parent

# The server's and Spark's distributions: none of them is in the base install.
NOT_IN_BASE = {"fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg",
               "psycopg-binary", "pydantic-settings", "prometheus-client", "pyspark"}
# Their modules, which nothing the base install imports may load.
NOT_IMPORTED_BY_BASE = ("fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg",
                        "pydantic_settings", "prometheus_client", "pyspark")


# -- the wheel, built from the Dockerfile's build context ------------------------------------


def dockerfile_build_copies() -> list[tuple[list[str], str]]:
    """The build stage's ``COPY <sources> <destination>`` lines."""
    build_stage = (ROOT / "Dockerfile").read_text().split("\nFROM ", 2)[1]
    return [(parts[:-1], parts[-1]) for line in build_stage.splitlines()
            if line.startswith("COPY ") and "--from" not in line
            for parts in [line.split()[1:]]]


def copy_build_context(destination: Path) -> Path:
    """The files the Dockerfile copies into its build stage, at the same places."""
    for sources, target in dockerfile_build_copies():
        for source in sources:
            path, into = ROOT / source, destination / target
            if path.is_dir():
                shutil.copytree(path, into, ignore=shutil.ignore_patterns("__pycache__"))
            elif target.endswith("/"):
                into.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, into / path.name)
            else:
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, into)
    return destination


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    context = copy_build_context(tmp_path_factory.mktemp("context"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                    str(context)], check=True, timeout=300)
    return next(out.glob("metaservice-*.whl"))


def wheel_requirements(wheel: Path, extras: Iterable[str] = ()) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(name).decode())
    requirements = [Requirement(line) for line in message.get_all("Requires-Dist") or []]
    return [r for r in requirements if _applies(r, extras)]


# -- a virtual environment holding exactly a set of distributions ----------------------------


def _applies(requirement: Requirement, extras: Iterable[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in ("", *extras))


def closure(requirements: Iterable[Requirement]) -> dict[str, metadata.Distribution]:
    """The installed distributions the requirements need, transitively, by normalised name."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = list(requirements)
    while todo:
        requirement = todo.pop()
        key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            distribution = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{requirement} is not installed in the test environment")
        found[key[0]] = distribution
        todo += [r for r in map(Requirement, distribution.requires or [])
                 if _applies(r, requirement.extras)]
    return found


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME") and not k.startswith("METASERVICE_")}
    return {**env, **extra}


class Venv:
    def __init__(self, path: Path) -> None:
        self.path = path
        # pip is this environment's, pointed at the new one (--python): faster than ensurepip
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                       timeout=120)
        self.python = str(path / "bin" / "python")
        self.site = Path(self.run_python("import sysconfig; print(sysconfig.get_path('purelib'))")
                         .strip())

    def run_python(self, code: str, *args: str, cwd: Path | None = None) -> str:
        result = subprocess.run([self.python, "-I", "-c", code, *args], capture_output=True,
                                text=True, cwd=cwd or self.path, env=clean_env(), timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def pip(self, *args: str, cwd: Path | None = None) -> None:
        result = subprocess.run([sys.executable, "-m", "pip", "--python", self.python, *args],
                                capture_output=True,
                                text=True, cwd=cwd or self.path, env=clean_env(), timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr

    def link(self, distributions: Iterable[metadata.Distribution]) -> None:
        """Installs the distributions by linking their files (the RECORD's, byte code too) from
        this environment."""
        for distribution in distributions:
            site = Path(str(distribution.locate_file("")))
            for file in distribution.files or []:
                relative = Path(str(file))
                if relative.parts[0] == "..":
                    continue  # console scripts
                if (site / relative).exists() and not (self.site / relative).exists():
                    (self.site / relative).parent.mkdir(parents=True, exist_ok=True)
                    (self.site / relative).symlink_to(site / relative)

    def script(self, name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.path / "bin" / name), *args], capture_output=True,
                              text=True, cwd=cwd, env=clean_env(), timeout=300)


def installed(tmp_path: Path, wheel_or_source: Path, requirements: list[Requirement]) -> Venv:
    venv = Venv(tmp_path / "venv")
    venv.link(closure(requirements).values())
    if wheel_or_source.is_dir():
        venv.pip("install", "--no-deps", "-q", "-e", str(wheel_or_source))
    else:
        venv.pip("install", "--no-deps", "--no-index", "-q", str(wheel_or_source))
    venv.pip("check")  # every requirement of the project and its dependencies is there
    return venv


# -- the base install ------------------------------------------------------------------------

_IMPORT_THE_PLUGIN = """
import importlib, importlib.util, json, pkgutil, sys
import spark_plugin
from spark_plugin import MetaServiceClient
skipped = []
for module in pkgutil.walk_packages(spark_plugin.__path__, "spark_plugin."):
    try:
        importlib.import_module(module.name)
    except ModuleNotFoundError as exc:  # pyspark is the spark extra
        if exc.name.split(".")[0] != "pyspark":
            raise
        skipped.append(module.name)
# pyiceberg and pyarrow write a root table through the server's Iceberg REST catalog ...
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
catalog = RestCatalog("lake", uri=sys.argv[1] + "/iceberg", warehouse="lake")
catalog.create_namespace("db")
table = catalog.create_table("db.orders", schema=pa.schema([pa.field("id", pa.int64())]))
table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
# ... and the plugin's client reads what the server made of it
client = MetaServiceClient(sys.argv[1])
client.register_source("packaging-check", "lake.db.orders")
forbidden = sys.argv[2].split(",")
print(json.dumps({
    "file": spark_plugin.__file__, "skipped": skipped,
    "job": client.get_job("packaging-check"),
    "snapshot": [table.refresh().current_snapshot().snapshot_id,
                 client.get_version("lake.db.orders").snapshot_id],
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in forbidden),
    "findable": [m for m in forbidden if importlib.util.find_spec(m) is not None],
}))
"""


def test_the_base_requirements_leave_out_the_server_and_spark(wheel: Path) -> None:
    base = wheel_requirements(wheel)
    assert {canonicalize_name(r.name) for r in base} & NOT_IN_BASE == set()
    assert set(closure(base)) & NOT_IN_BASE == set(), "pulled in through a dependency"
    server = {canonicalize_name(r.name) for r in wheel_requirements(wheel, ["server"])}
    assert {"fastapi", "sqlalchemy", "alembic", "psycopg", "uvicorn"} <= server


def test_the_base_install_imports_the_plugin_and_its_client_works_without_the_server(
        wheel: Path, tmp_path: Path) -> None:
    venv = installed(tmp_path, wheel, wheel_requirements(wheel))
    server = ServerProcess(f"sqlite:///{tmp_path / 'metaservice.db'}", tmp_path / "server.log",
                           env={"METASERVICE_WAREHOUSE": str(tmp_path / "warehouse")})
    server.start()
    try:
        report = json.loads(venv.run_python(_IMPORT_THE_PLUGIN, server.url,
                                            ",".join(NOT_IMPORTED_BY_BASE)))
    finally:
        server.kill()
    assert report["file"].startswith(str(venv.site))
    assert report["loaded"] == [] and report["findable"] == []
    assert report["job"]["job"] == "packaging-check"
    assert report["snapshot"][0] == report["snapshot"][1]
    assert all(m.startswith("spark_plugin.streaming") for m in report["skipped"]), report
    # The server's command says what is missing instead of a traceback.
    served = venv.script("metaservice", "serve", cwd=tmp_path)
    assert served.returncode != 0
    assert "pip install 'metaservice[server]'" in served.stderr, served.stderr
    assert "Traceback" not in served.stderr
    maintenance = venv.script("metaservice-maintenance", "--help", cwd=tmp_path)
    assert maintenance.returncode == 0, maintenance.stderr
    # So does the demo's.
    demo = venv.script("metaservice-demo", "--duration", "1", cwd=tmp_path)
    assert demo.returncode == 2, demo.stdout + demo.stderr
    assert "pip install 'metaservice[server,spark]'" in demo.stderr, demo.stderr
    assert "Traceback" not in demo.stderr


# -- the server extra: migrations found wherever it runs -------------------------------------

_WHERE_ARE_THE_MIGRATIONS = """
import importlib.util, json
from metaservice.db.migrate import script_location
print(json.dumps({"location": str(script_location()),
                  "top_level_migrations": importlib.util.find_spec("migrations") is not None}))
"""


def _migrates(venv: Venv, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    url = f"sqlite:///{tmp_path / 'upgraded.db'}"
    upgraded = venv.script("metaservice", "--database-url", url, "db", "upgrade", cwd=elsewhere)
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stdout.strip().endswith(f"at revision {head_revision()}"), upgraded.stdout


def _serves(venv: Venv, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    port = free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            [str(venv.path / "bin" / "metaservice"), "serve", "--port", str(port)],
            cwd=elsewhere, env=clean_env(METASERVICE_LOG_LEVEL="warning"), stdout=log,
            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)
        assert httpx.get(f"http://127.0.0.1:{port}/jobs").status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=30)
    # `serve` migrated ./metaservice.db, the default, in the directory it ran in
    served = venv.script("metaservice", "db", "current", cwd=elsewhere)
    assert served.stdout.strip() == f"{head_revision()} (up to date)", served.stdout


def test_the_wheel_carries_the_migrations_inside_the_server_package_and_the_assets(
        wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith("migrations/")]
    assert "metaservice/_migrations/env.py" in names
    assert "metaservice/_migrations/script.py.mako" in names
    revisions = sorted(p.name for p in (ROOT / "migrations" / "versions").glob("0*.py"))
    assert [n.rsplit("/", 1)[1] for n in names
            if re.fullmatch(r"metaservice/_migrations/versions/0.*\.py", n)] == revisions
    assert not [n for n in names if n.startswith(("spark_plugin/demo", "metaservice/demo"))]
    assert {"metaservice/py.typed", "spark_plugin/py.typed", "metaservice_demo/py.typed",
            "metaservice_demo/__init__.py", "metaservice_demo/__main__.py",
            "metaservice_demo/demo.py", "metaservice_demo/server.py",
            "metaservice_soak/py.typed", "metaservice_soak/__main__.py",
            "metaservice_names/__init__.py", "metaservice_names/py.typed"} <= set(names)
    if (ROOT / "metaservice" / "ui" / "static").exists():
        assert [n for n in names if n.startswith("metaservice/ui/static/")], "dashboard assets"


def test_the_wheel_s_commands_name_modules_it_carries(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names
                            if n.endswith(".dist-info/entry_points.txt"))
    scripts = dict(re.findall(r"^([\w-]+) = ([\w.]+):\w+$", entry_points, re.M))
    assert scripts == {"metaservice": "metaservice.cli",
                       "metaservice-maintenance": "spark_plugin.maintenance",
                       "metaservice-demo": "metaservice_demo.demo",
                       "metaservice-soak": "metaservice_soak.__main__"}, entry_points
    for module in scripts.values():
        assert module.replace(".", "/") + ".py" in names


# -- what imports what ----------------------------------------------------------------------


def _imported_modules(package: str) -> dict[str, set[str]]:
    """Per source file of ``package``, the modules it imports (at any depth of the file)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        modules: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        found[path.relative_to(ROOT).as_posix()] = modules
    return found


def test_the_server_imports_neither_the_plugin_nor_the_applications() -> None:
    for path, modules in _imported_modules("metaservice").items():
        wrong = {m for m in modules if m.split(".")[0] in ("spark_plugin", "metaservice_demo",
                                                           "metaservice_soak")}
        assert not wrong, f"{path} imports {sorted(wrong)}"


def test_the_plugin_imports_neither_the_demo_nor_the_soak() -> None:
    for path, modules in _imported_modules("spark_plugin").items():
        assert not [m for m in modules
                    if m.split(".")[0] in ("metaservice_demo", "metaservice_soak")], path


def test_the_demo_uses_the_plugin_s_public_api_and_starts_the_server_as_a_user_does() -> None:
    """``import spark_plugin`` and its exports only, no private or streaming module; of the
    server's package, DuckDB's offline loader only (the server runs as ``metaservice serve``)."""
    import spark_plugin

    for path, modules in _imported_modules("metaservice_demo").items():
        plugin = {m for m in modules if m.split(".")[0] == "spark_plugin"}
        assert plugin <= {"spark_plugin"} | {f"spark_plugin.{n}" for n in spark_plugin.__all__}, (
            path, plugin)
        server = {m for m in modules if m.split(".")[0] == "metaservice"}
        assert server <= {"metaservice.duckdb_offline", "metaservice.duckdb_offline.connect"}, (
            path, server)


def test_the_installed_server_finds_its_migrations_from_any_directory(
        wheel: Path, tmp_path: Path) -> None:
    venv = installed(tmp_path, wheel, wheel_requirements(wheel, ["server"]))
    where = json.loads(venv.run_python(_WHERE_ARE_THE_MIGRATIONS, cwd=tmp_path))
    assert where == {"location": str(venv.site / "metaservice" / "_migrations"),
                     "top_level_migrations": False}
    _migrates(venv, tmp_path)
    _serves(venv, tmp_path)


def test_the_editable_server_uses_the_checkout_s_migrations(wheel: Path, tmp_path: Path) -> None:
    source = copy_build_context(tmp_path / "source")
    venv = installed(tmp_path, source, wheel_requirements(wheel, ["server"]))
    where = json.loads(venv.run_python(_WHERE_ARE_THE_MIGRATIONS, cwd=tmp_path))
    assert where == {"location": str(source / "migrations"), "top_level_migrations": False}
    _migrates(venv, tmp_path)


def test_the_image_installs_the_server_extra() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"pip install [^\n]*'metaservice\[server\]'", dockerfile)
    assert re.search(r"pip wheel [^\n]*'\.\[server\]'", dockerfile)


# -- the README's commands -------------------------------------------------------------------


def _readme_extras() -> list[list[str]]:
    """The extras each of the README's two commands installs."""
    block = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    return [re.findall(r"pip install [^&]*'\.\[([\w,]+)\]'", line)[0].split(",")
            for line in block.splitlines() if line.strip()]


def _with_own_extras(wheel: Path, extras: list[str]) -> set[str]:
    """The distributions the extras name, with those of the project's own extras they name."""
    requirements = wheel_requirements(wheel, extras)
    own = [e for r in requirements if canonicalize_name(r.name) == "metaservice" for e in r.extras]
    if own:
        requirements = wheel_requirements(wheel, [*extras, *own])
    return {str(canonicalize_name(r.name)) for r in requirements} - {"metaservice"}


def test_the_readme_commands_install_the_server_and_spark(wheel: Path) -> None:
    demo, tests = _readme_extras()
    needed = {"fastapi", "sqlalchemy", "alembic", "pyspark", "pyiceberg",
              # the demo's reads of the catalog's consistent warehouse
              "duckdb", "duckdb-extension-iceberg", "duckdb-extension-avro",
              "duckdb-extension-httpfs"}
    assert needed <= _with_own_extras(wheel, demo), demo
    assert needed | {"pytest"} <= _with_own_extras(wheel, tests), tests
