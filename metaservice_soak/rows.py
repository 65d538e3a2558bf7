"""The soak's tables, its rows, and the state every role keeps under ``--state DIR``.

Rows are a function of ``(seed, root, batch number)``: an ingest role restarted after a SIGKILL
produces exactly the rows of the batch it was appending, so resolving an append whose outcome is
unknown never needs anything but the batch number and the barrier it was sent with.

Every row has a unique ``id`` (orders and payments have disjoint id ranges), a ``customer`` and an
integer ``amount`` (cents: sums are exact, so the invariant compares with ``==``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from pathlib import Path
from typing import Any

CATALOG = "lake"
"""The server's built-in catalog (``metaservice serve``'s default ``METASERVICE_CATALOG_NAME``)."""
NAMESPACE = "soak"


def table(name: str) -> str:
    return f"{CATALOG}.{NAMESPACE}.{name}"


ORDERS = table("orders")
PAYMENTS = table("payments")
ORDERS_BY_BATCH = table("orders_by_batch")
ORDERS_BY_STREAM = table("orders_by_stream")
LEDGER = table("ledger")
STALLED_SINK = table("orders_stalled")
ROOTS = (ORDERS, PAYMENTS)
DERIVED = (ORDERS_BY_BATCH, ORDERS_BY_STREAM, LEDGER)
PIPELINE = (*ROOTS, *DERIVED)
"""The tables the invariant spans (the stalled job's sink is not one of them)."""

# job ids (stable across restarts: a restarted job resumes as itself)
BATCH_JOB = "soak-sibling-batch"
STREAM_JOB = "soak-sibling-stream"
JOIN_JOB = "soak-join"
STALLED_JOB = "soak-stalled-join"
# root labels (the ``metaservice.root-label`` of ingestion commits)
ORDERS_LABEL = "soak-ingest-plugin"
PAYMENTS_LABEL = "soak-ingest-engine"

INGEST_ROLES = {"ingest_plugin": ORDERS, "ingest_engine": PAYMENTS}

CUSTOMERS = 12
ORDERS_PER_BATCH = 4
PAYMENTS_PER_BATCH = 3
ID_BASE = {ORDERS: 1_000_000_000, PAYMENTS: 2_000_000_000}
LEDGER_ORDER = "order"
LEDGER_PAYMENT = "payment"

ROW_COLUMNS = (("id", "long"), ("customer", "long"), ("amount", "long"))


def spark_schema(with_kind: bool = False) -> str:
    columns = ", ".join(f"{n} {t}" for n, t in ROW_COLUMNS)
    return columns + (", kind string" if with_kind else "")


def iceberg_schema(with_kind: bool = False) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    fields = [NestedField(i + 1, n, LongType(), required=False)
              for i, (n, _t) in enumerate(ROW_COLUMNS)]
    if with_kind:
        fields.append(NestedField(len(fields) + 1, "kind", StringType(), required=False))
    return Schema(*fields)


def ensure_tables(catalog: Any) -> None:
    """Create the namespace and every table that does not exist yet (any role may be first;
    several may race)."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError

    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace_if_not_exists(NAMESPACE)
    for name in (*ROOTS, ORDERS_BY_BATCH, ORDERS_BY_STREAM, LEDGER, STALLED_SINK):
        identifier = (NAMESPACE, name.rsplit(".", 1)[1])
        if catalog.table_exists(identifier):
            continue
        with contextlib.suppress(TableAlreadyExistsError):
            catalog.create_table(identifier, schema=iceberg_schema(with_kind=name == LEDGER))


def batch_rows(seed: int, root: str, batch: int) -> dict[str, list[int]]:
    """The rows of batch number ``batch`` of ``root``, as columns."""
    size = ORDERS_PER_BATCH if root == ORDERS else PAYMENTS_PER_BATCH
    rng = random.Random(f"{seed}:{root}:{batch}")
    first = ID_BASE[root] + batch * size
    ids = list(range(first, first + size))
    return {"id": ids,
            "customer": [rng.randrange(CUSTOMERS) for _ in ids],
            "amount": [rng.randint(100, 50_000) for _ in ids]}


# -- the state directory ----------------------------------------------------------------------


class StateDir:
    """``DIR/events/ROLE.jsonl`` (append-only, one flushed line per event), ``DIR/state/``
    (each role's own progress, written atomically), ``DIR/control/stop_ingest``,
    ``DIR/final/ROLE.json``, ``DIR/warehouse``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        for sub in ("events", "state", "control", "final", "checkpoints"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def events_file(self, role: str) -> Path:
        return self.root / "events" / f"{role}.jsonl"

    def state_file(self, name: str) -> Path:
        return self.root / "state" / f"{name}.json"

    def final_file(self, role: str) -> Path:
        return self.root / "final" / f"{role}.json"

    @property
    def stop_ingest_file(self) -> Path:
        return self.root / "control" / "stop_ingest"

    def ingest_stopping(self) -> bool:
        return self.stop_ingest_file.exists()

    def load(self, name: str) -> dict[str, Any] | None:
        return read_json(self.state_file(name))

    def save(self, name: str, data: dict[str, Any]) -> None:
        write_json_atomically(self.state_file(name), data)

    def events(self, role: str) -> list[dict[str, Any]]:
        return read_events(self.events_file(role))

    def final(self, role: str) -> dict[str, Any] | None:
        return read_json(self.final_file(role))


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object written by ``write_json_atomically``; ``None`` when there is none."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return data


def write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    """Write, fsync, rename: after a SIGKILL the file holds the old or the new content."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as out:
        json.dump(data, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every complete line of an events file (a SIGKILL may leave the last one cut short)."""
    events = []
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return events


class Events:
    """Appends one JSON object per line to ``DIR/events/ROLE.jsonl``, flushed per write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # a line cut short by a SIGKILL of the previous run ends here, not in the next event
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_size and not path.read_bytes().endswith(b"\n"):
                with path.open("ab") as out:
                    out.write(b"\n")
        self._out = path.open("a", buffering=1)

    def write(self, kind: str, **fields: Any) -> None:
        self._out.write(json.dumps({"t": time.time(), "kind": kind, **fields}) + "\n")
        self._out.flush()
