"""The catalog's consistent warehouses (docs/contract.md#consistent-warehouses), the pure part:
which consistent warehouse a client's ``warehouse`` names, and a table's metadata at its cut.

``warehouse=lake`` is the catalog's head; ``lake@strong`` a consistent warehouse in which every
table is served at its pipeline's strong cut, fixed for the read session at the first table
loaded from the pipeline; ``lake@barrier=<B>`` one in which every table is served at barrier B.
Connecting to one opens a read session (``service.py``). Not to be confused with Iceberg views,
the SQL objects (``catalog/views/``).

A table at its cut is its metadata as a read session serves it: ``current-snapshot-id`` and
``refs.main`` name the snapshot, and only that snapshot and its ancestors are left in
``snapshots`` and ``snapshot-log`` (DuckDB reads the newest entry of ``snapshots``, not
``refs.main``). The answer's ``metadata-location`` names a file holding exactly that metadata
(``cut_metadata_location``): engines that read the file instead of the answer's JSON (DuckDB's
``iceberg_snapshots``) see the cut too.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import Snapshot

from metaservice.catalog.errors import BadRequestError

BARRIER_PROPERTY = "metaservice.barrier"
CONSISTENCY_PROPERTY = "metaservice.consistency"

class CutKind(StrEnum):
    """Which cut a consistent warehouse serves."""

    strong = "strong"
    barrier = "barrier"


@dataclass(frozen=True)
class ConsistentWarehouse:
    """A consistent warehouse of the catalog: strong, or every table at one barrier."""

    kind: CutKind
    barrier: int | None = None

    def __str__(self) -> str:
        return self.kind.value if self.barrier is None else f"barrier={self.barrier}"


_CUT = re.compile(r"^(?:(?P<strong>strong)|barrier=(?P<barrier>0|[1-9][0-9]{0,18}))$")


def parse_warehouse(warehouse: str | None, catalog_name: str) -> ConsistentWarehouse | None:
    """The consistent warehouse a client's ``warehouse`` names, or None for the head.

    Raises:
        BadRequestError: another catalog, or a consistent warehouse this catalog does not serve.
    """
    if warehouse is None or warehouse == catalog_name:
        return None
    name, at, cut = warehouse.partition("@")
    if name != catalog_name or not at:
        raise BadRequestError(f"unknown warehouse {warehouse!r}; this catalog serves "
                              f"{catalog_name!r} and its consistent warehouses "
                              f"{catalog_name}@strong and "
                              f"{catalog_name}@barrier=<B>")
    match = _CUT.match(cut)
    if match is None:
        raise BadRequestError(f"unknown consistent warehouse {cut!r} of {catalog_name}: use "
                              f"{catalog_name}@strong or {catalog_name}@barrier=<B> "
                              "(B a non-negative integer)")
    if match["strong"]:
        return ConsistentWarehouse(CutKind.strong)
    barrier = int(match["barrier"])
    if barrier >= 2**63:
        raise BadRequestError(f"barrier {barrier} is out of range")
    return ConsistentWarehouse(CutKind.barrier, barrier)


def metadata_at(metadata: TableMetadata, snapshot_id: int, barrier: int,
                kind: CutKind) -> TableMetadata | None:
    """``metadata`` at its cut, as a read session serves it at ``barrier``, whose snapshot is
    ``snapshot_id``; None when that snapshot is no longer in the metadata."""
    head = metadata.snapshot_by_id(snapshot_id)
    if head is None:
        return None
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    kept: set[int] = set()
    current: Snapshot | None = head
    while current is not None and current.snapshot_id not in kept:
        kept.add(current.snapshot_id)
        parent = current.parent_snapshot_id
        current = by_id.get(parent) if parent is not None else None
    refs = {name: ref for name, ref in metadata.refs.items()
            if name != MAIN_BRANCH and ref.snapshot_id in kept}
    refs[MAIN_BRANCH] = SnapshotRef.model_validate(
        {"snapshot-id": snapshot_id, "type": SnapshotRefType.BRANCH})
    schema_ids = {schema.schema_id for schema in metadata.schemas}
    schema_id = (head.schema_id if head.schema_id is not None and head.schema_id in schema_ids
                 else metadata.current_schema_id)
    properties = {**metadata.properties, BARRIER_PROPERTY: str(barrier),
                  CONSISTENCY_PROPERTY: kind.value}
    # As of the cut: the table's newer commits change nothing in what a session serves (save a new
    # schema, spec or property), so sessions at one cut share one file (cut_metadata_location).
    as_of_cut: dict[str, Any] = {"last_updated_ms": head.timestamp_ms}
    if metadata.format_version >= 2 and head.sequence_number is not None:
        as_of_cut["last_sequence_number"] = head.sequence_number  # V1 has no sequence numbers
    return metadata.model_copy(update={
        **as_of_cut,
        "current_snapshot_id": snapshot_id,
        "current_schema_id": schema_id,
        "snapshots": [s for s in metadata.snapshots if s.snapshot_id in kept],
        "snapshot_log": [e for e in metadata.snapshot_log
                         if e.snapshot_id in kept and e.timestamp_ms <= head.timestamp_ms],
        "metadata_log": [e for e in metadata.metadata_log
                         if e.timestamp_ms <= head.timestamp_ms],
        "refs": refs,
        "statistics": [s for s in metadata.statistics if s.snapshot_id in kept],
        "partition_statistics": [s for s in metadata.partition_statistics
                                 if s.snapshot_id in kept],
        "properties": properties,
    })


def cut_metadata_location(head_location: str, content: bytes) -> str:
    """Where the metadata a read session serves (``metadata_at`` of the file at
    ``head_location``; ``content`` is its JSON) is written: in the head file's directory, named
    after the content's hash, so every session serving the same cut shares one file, also
    across later commits.

    Named ``cut-<hash>.metadata.json`` (files written before the rename are ``view-<hash>…``,
    recorded with their location like any other): no version prefix, so it never passes for a
    version of the table's own history (the pointer never names it).
    """
    digest = hashlib.sha256(content).hexdigest()[:32]
    directory = head_location.rsplit("/", 1)[0]
    return f"{directory}/cut-{digest}.metadata.json"
