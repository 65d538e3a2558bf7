"""The end of a soak: has every job drained, and did every acknowledged row land exactly once?

    python -m metaservice_soak.checks final   --url URL --token TOKEN --state DIR
    python -m metaservice_soak.checks drained --url URL --token TOKEN --state DIR

``drained`` is true once both ingest roles wrote ``DIR/final/ROLE.json`` (one final barrier F)
and every derived table completed F. ``final`` then reads the head of every table through the
built-in catalog and compares it with the ids the ingest roles acknowledged
(``DIR/events/ingest_*.jsonl``): per table, the ids missing (lost), the ids held more than once
(doubled) and the ids no acknowledged append holds (unexpected); the invariant at the head; and
whether each table's strong version is F. It prints the JSON and exits 0 when ``ok``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from metaservice_soak import invariant
from metaservice_soak.rows import (
    CATALOG,
    DERIVED,
    INGEST_ROLES,
    LEDGER,
    LEDGER_ORDER,
    LEDGER_PAYMENT,
    NAMESPACE,
    ORDERS,
    PAYMENTS,
    PIPELINE,
    StateDir,
)


def _client(url: str, token: str | None) -> Any:
    import spark_plugin as sp

    return sp.MetaServiceClient(url, token=token or None)


def final_barrier(state_dir: str) -> int | None:
    """F, once both ingest roles finished; ``None`` before."""
    state = StateDir(state_dir)
    finals = [state.final(role) for role in INGEST_ROLES]
    if any(f is None for f in finals):
        return None
    barriers = {f["last_barrier"] for f in finals if f is not None}
    return barriers.pop() if len(barriers) == 1 else max(barriers)


def drained(url: str, token: str | None, state_dir: str) -> bool:
    """Every derived table has completed the final barrier."""
    import spark_plugin as sp

    final = final_barrier(state_dir)
    if final is None:
        return False
    with _client(url, token) as client:
        for table in DERIVED:
            try:
                latest = client.table_barriers(table, limit=1).get("latest_barrier")
            except sp.UnknownTableError:
                return False
            if latest is None or int(latest) < final:
                return False
    return True


def acknowledged(state_dir: str) -> dict[str, list[int]]:
    """Per root, every id an ingest role acknowledged (after the server did)."""
    state = StateDir(state_dir)
    ids: dict[str, list[int]] = {ORDERS: [], PAYMENTS: []}
    for role, root in INGEST_ROLES.items():
        batches: dict[int, list[int]] = {}
        for event in state.events(role):
            if event.get("kind") == "acked":
                batches[event.get("batch", len(batches))] = event["ids"]
        ids[root] = [i for batch in batches.values() for i in batch]
    return ids


def _compare(expected: list[int], present: list[int]) -> dict[str, Any]:
    counts = Counter(present)
    wanted = set(expected)
    lost = sorted(wanted - counts.keys())
    doubled = sorted(i for i, n in counts.items() if n > 1)
    unexpected = sorted(counts.keys() - wanted)
    return {"expected": len(wanted), "present": len(present), "lost": len(lost),
            "doubled": len(doubled), "unexpected": len(unexpected),
            "examples": {"lost": lost[:5], "doubled": doubled[:5], "unexpected": unexpected[:5]}}


def final_check(url: str, token: str | None, state_dir: str) -> dict[str, Any]:
    """The end-of-run verdict; see the module docstring."""
    from pyiceberg.catalog import load_catalog

    props = {"type": "rest", "uri": f"{url.rstrip('/')}/iceberg", "warehouse": CATALOG}
    if token:
        props["token"] = token
    catalog = load_catalog(CATALOG, **props)
    data = {name: catalog.load_table((NAMESPACE, name.rsplit(".", 1)[1])).scan().to_arrow()
            for name in PIPELINE}
    expected = acknowledged(state_dir)
    ids = {name: data[name]["id"].to_pylist() for name in PIPELINE}
    kinds = data[LEDGER]["kind"].to_pylist()
    ids["ledger orders"] = [i for i, k in zip(ids[LEDGER], kinds, strict=True)
                            if k == LEDGER_ORDER]
    ids["ledger payments"] = [i for i, k in zip(ids[LEDGER], kinds, strict=True)
                              if k == LEDGER_PAYMENT]
    sources = {ORDERS: ORDERS, PAYMENTS: PAYMENTS}
    tables = {name: _compare(expected[sources.get(name, ORDERS)], ids[name])
              for name in (ORDERS, PAYMENTS, *DERIVED[:2])}
    tables["ledger orders"] = _compare(expected[ORDERS], ids["ledger orders"])
    tables["ledger payments"] = _compare(expected[PAYMENTS], ids["ledger payments"])
    head_breaches = invariant.breaches(invariant.totals_from_arrow(data))
    final = final_barrier(state_dir)
    strong: dict[str, bool] = {}
    strong_barriers: dict[str, int | None] = {}
    with _client(url, token) as client:
        for name in PIPELINE:
            try:
                strong_barriers[name] = client.get_version(name, "strong").barrier
            except Exception:  # noqa: BLE001 - no strong version: not at F
                strong_barriers[name] = None
            strong[name] = final is not None and strong_barriers[name] == final
    result = {
        "final_barrier": final,
        "rows_ingested": sum(len(set(v)) for v in expected.values()),
        "rows_lost": {name: t["lost"] for name, t in tables.items()},
        "rows_unexpected": {name: t["unexpected"] for name, t in tables.items()},
        "rows_doubled": {name: t["doubled"] for name, t in tables.items()},
        "tables": tables,
        "invariant_at_head": not head_breaches,
        "invariant_at_head_detail": head_breaches,
        "strong_at_final": strong,
        "strong_barriers": strong_barriers,
    }
    result["ok"] = (final is not None
                    and not any(t["lost"] or t["doubled"] or t["unexpected"]
                                for t in tables.values())
                    and not head_breaches and all(strong.values()))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metaservice_soak.checks",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("check", choices=("final", "drained"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", default="")
    parser.add_argument("--state", required=True)
    args = parser.parse_args(argv)
    if args.check == "drained":
        done = drained(args.url, args.token or None, args.state)
        print(json.dumps({"drained": done}))
        return 0 if done else 1
    result = final_check(args.url, args.token or None, args.state)
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
