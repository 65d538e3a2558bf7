"""The modules of the server a catalog commit's call path crosses, and how often it returns to
a module it had left: how far a reader follows one request through the code.

    python -m benchmarks.call_path
    cd /tmp/before && python /work/main/benchmarks/call_path.py   # another checkout's server

An append to an existing table (``POST /iceberg/v1/namespaces/db/tables/t``, an ``add-snapshot``
and ``set-snapshot-ref`` of the head, as pyiceberg sends it) is sent once to warm every cache,
then once more under a profiler (``threading.setprofile``, set before the server's threads
start) that notes, at
each call and return, the ``metaservice`` module whose code runs: the called function's, or
the caller's after a return (the nearest ``metaservice`` frame; library code in between is not
a step). In each thread, repeated steps in one module count once. The path's **modules** are
the distinct modules; its **returns** the steps into a module the path had already been in and
left. The server runs in this process (FastAPI's ``TestClient``, SQLite, a temporary warehouse,
the app's default settings), as ``metaservice serve`` would, with the lean routes.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

PACKAGE = "metaservice"


def _module_of(frame: FrameType | None) -> str | None:
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            return str(name)
        frame = frame.f_back
    return None


class Profiler:
    """Notes each thread's steps while ``recording``; set (``threading.setprofile``) before the
    server's threads start, so that every one of them carries it."""

    def __init__(self) -> None:
        self.recording = False
        self.steps: dict[str, list[str]] = defaultdict(list)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.recording or event not in ("call", "return"):
            return
        module = _module_of(frame if event == "call" else frame.f_back)
        if module is None:
            return
        path = self.steps[threading.current_thread().name]
        if not path or path[-1] != module:
            path.append(module)

    def trace(self, send: Any) -> dict[str, list[str]]:
        """The steps of each thread while ``send()`` runs: module names, repeats collapsed."""
        self.steps.clear()
        self.recording = True
        try:
            send()
        finally:
            self.recording = False
        return dict(self.steps)


def measure() -> tuple[int, int, list[str]]:
    """Distinct modules, steps back into a module already left, and the path (all threads)."""
    from fastapi.testclient import TestClient

    from benchmarks._environment import sqlite_file
    from metaservice.app import create_app
    from metaservice.settings import Settings

    profiler = Profiler()
    threading.setprofile(profiler)
    try:
        with sqlite_file("call_path") as url, tempfile.TemporaryDirectory() as warehouse:
            app = create_app(Settings(database_url=url, warehouse=warehouse))
            return _measure(TestClient(app), profiler)
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]


def _measure(client: Any, profiler: Profiler) -> tuple[int, int, list[str]]:
    tables = "/iceberg/v1/namespaces/db/tables"
    schema = {"type": "struct", "schema-id": 0,
              "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    with client:
        assert client.post("/iceberg/v1/namespaces", json={"namespace": ["db"]}).is_success
        assert client.post(tables, json={"name": "t", "schema": schema}).is_success

        def append(snapshot_id: int) -> dict[str, list[str]]:
            metadata = client.get(f"{tables}/t").json()["metadata"]
            head = metadata.get("current-snapshot-id")
            snapshot = {"snapshot-id": snapshot_id,
                        "sequence-number": metadata["last-sequence-number"] + 1,
                        "timestamp-ms": metadata["last-updated-ms"] + 1,
                        "manifest-list": f"{metadata['location']}/metadata/snap-{snapshot_id}.avro",
                        "summary": {"operation": "append"}, "schema-id": 0}
            if head is not None:
                snapshot["parent-snapshot-id"] = head
            body = {"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main",
                                      "snapshot-id": head}],
                    "updates": [{"action": "add-snapshot", "snapshot": snapshot},
                                {"action": "set-snapshot-ref", "ref-name": "main",
                                 "type": "branch", "snapshot-id": snapshot_id}]}
            answers: list[Any] = []
            steps = profiler.trace(lambda: answers.append(client.post(f"{tables}/t", json=body)))
            assert answers[0].status_code == 200, answers[0].text
            return steps

        append(1)  # warm-up: imports, caches, the first connection
        steps = append(2)
    path = [module for thread_steps in steps.values() for module in thread_steps]
    modules = len(set(path))
    returns = sum(len(s) - len(set(s)) for s in steps.values())
    return modules, returns, path


ENDPOINT = ("catalog.commit_endpoints", "catalog.tables.commit_endpoints")


def figures(path: list[str]) -> tuple[int, int, int]:
    """Distinct modules; steps into a module already left; distinct such steps (from, to)."""
    seen: set[str] = set()
    returns: list[tuple[str, str]] = []
    for before, module in zip([""] + path, path, strict=False):
        if module in seen:
            returns.append((before, module))
        seen.add(module)
    return len(seen), len(returns), len(set(returns))


def main() -> None:
    _, _, path = measure()
    short = [m.removeprefix(PACKAGE + ".") for m in path]
    endpoint = next(i for i, m in enumerate(short) if m in ENDPOINT)
    for what, steps in (("the whole request", short),
                        ("from the endpoint down", short[endpoint:])):
        modules, returns, edges = figures(steps)
        print(f"a catalog commit, {what}: {modules} modules, {returns} steps back into a module "
              f"already left ({edges} distinct)")
    print("  " + " > ".join(short[endpoint:]))


if __name__ == "__main__":
    sys.path.insert(0, str(Path.cwd()))
    main()
