"""Carry out a MetaService rollback plan (docs/contract.md#rollback-plans) on the Iceberg tables.

A plan (``POST /rollback-plans``) names, for a revised table and everything downstream, the
snapshot each table goes back to. The safe order, which :func:`rollback_tables` follows when it
is given a client:

1. **apply** the plan on the service: the barriers above B are taken back, the affected jobs are
   told to abort, and the tables are *fenced* (no commit, jobs wait);
2. roll each Iceberg table back to its target snapshot (this module, with pyiceberg);
3. **complete** the plan: the fence is lifted and the jobs restart from B.

So no job writes on top of a table that is not rolled back yet. Without a client only step 2 is
done (the operator applies and completes the plan). Applying and completing need an ``admin``
token when the service checks tokens.

A plan in ``full`` mode cannot be carried out by rolling back: some target snapshot was expired
(or no snapshot is at or before B), so those tables must be rebuilt; :func:`rollback_tables`
refuses it with :class:`RollbackNotIncrementalError` before touching anything.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_plugin._client import MetaServiceClient
from spark_plugin._errors import (
    LakeStateError,
    RollbackNotIncrementalError,
    SnapshotNotFoundError,
)
from spark_plugin._iceberg import ancestors, load_table
from spark_plugin._names import TableName

logger = logging.getLogger(__name__)

__all__ = ["RolledBackTable", "RollbackNotIncrementalError", "rollback_tables"]


@dataclass(frozen=True)
class RolledBackTable:
    """What happened to one table: ``action`` is ``"rolled_back"`` (the target was an ancestor
    of the current snapshot), ``"set_current"`` (the target exists but is not an ancestor, e.g.
    after an earlier rollback) or ``"unchanged"`` (it was already current)."""

    table: str
    previous_snapshot_id: int | None
    snapshot_id: int
    action: str


def rollback_tables(plan: Mapping[str, Any] | str, catalog: Any = None, *,
                    client: MetaServiceClient | None = None,
                    apply: bool = True, complete: bool = True) -> dict[str, RolledBackTable]:
    """Roll every table of ``plan`` back to its target snapshot.

    Args:
        plan: the plan as the service answered it (``POST /rollback-plans`` or
            ``GET /rollback-plans/{id}``), or its id (then ``client`` is required).
        catalog: a pyiceberg ``Catalog`` (named like the tables' catalog part), a
            :class:`~spark_plugin.CatalogSpec`, a mapping from catalog names to either, or
            ``None`` to find catalogs by name (Spark's configuration of the active session,
            pyiceberg's configuration, else MetaService's built-in catalog at the client's
            server).
        client: when given, the plan is applied first (if it is still ``planned`` and ``apply``)
            and completed after the Iceberg rollbacks (if ``complete``).
        apply: apply a ``planned`` plan before touching Iceberg (needs ``client``).
        complete: complete the plan once every table is rolled back (needs ``client``).

    Returns:
        ``{table name: RolledBackTable}`` for every table of the plan.

    Raises:
        RollbackNotIncrementalError: the plan is ``full``; nothing was changed.
        SnapshotNotFoundError: a target snapshot is not in its Iceberg table (expired outside
            MetaService); the tables before it in the plan are already rolled back, and the plan
            stays applied (fenced) until the operator completes it.
        APIError: the service refused to apply or complete the plan.
    """
    document = _document(plan, client)
    if document.get("mode") == "full":
        unavailable = {t["table"]: t.get("unavailable_reason") or "unavailable"
                       for t in document["tables"] if not t.get("target_available", True)}
        raise RollbackNotIncrementalError(
            f"rollback plan {document.get('id')} is full: {document.get('reason')}; rebuild "
            f"{', '.join(sorted(unavailable))} instead of rolling back", unavailable)
    if client is not None and apply and document.get("state") == "planned":
        document = client.request("POST", f"/rollback-plans/{document['id']}/apply",
                                  idempotent=True)
        logger.info("rollback_plan_applied", extra={"plan": document["id"]})
    results: dict[str, RolledBackTable] = {}
    for entry in sorted(document["tables"], key=lambda t: (t.get("distance", 0), t["table"])):
        target = entry.get("target")
        if target is None:  # only in a full plan, refused above
            raise LakeStateError(f"{entry['table']} has no target snapshot in the plan")
        results[entry["table"]] = _roll_back(entry["table"], int(target["snapshot_id"]), catalog,
                                            client)
    if client is not None and complete and document.get("state") in ("planned", "applied"):
        if document.get("state") == "planned":
            logger.warning("rollback_plan_not_applied", extra={"plan": document["id"]})
        else:
            client.request("POST", f"/rollback-plans/{document['id']}/complete", idempotent=True)
            logger.info("rollback_plan_completed", extra={"plan": document["id"]})
    return results


def _document(plan: Mapping[str, Any] | str, client: MetaServiceClient | None) -> dict[str, Any]:
    if isinstance(plan, str):
        if client is None:
            raise ValueError("a plan id needs a client to fetch the plan")
        return dict(client.request("GET", f"/rollback-plans/{plan}", idempotent=True))
    if "tables" not in plan:
        raise ValueError("not a rollback plan: no 'tables'")
    return dict(plan)


def _roll_back(name: str, snapshot_id: int, catalog: Any,
               client: MetaServiceClient | None) -> RolledBackTable:
    table = load_table(TableName.parse(name), catalog, client=client)
    metadata = table.metadata
    current = metadata.current_snapshot_id
    if current == snapshot_id:
        return RolledBackTable(name, current, snapshot_id, "unchanged")
    if metadata.snapshot_by_id(snapshot_id) is None:
        raise SnapshotNotFoundError(
            f"snapshot {snapshot_id} of {name} is not in the table (expired outside MetaService?)")
    if any(s.snapshot_id == snapshot_id for s in ancestors(metadata, current)):
        table.manage_snapshots().rollback_to_snapshot(snapshot_id).commit()
        action = "rolled_back"
    else:
        table.manage_snapshots().set_current_snapshot(snapshot_id).commit()
        action = "set_current"
    logger.info("table_rolled_back", extra={"table": name, "snapshot_id": snapshot_id,
                                            "previous_snapshot_id": current, "action": action})
    return RolledBackTable(name, current, snapshot_id, action)
