"""The invariant every reader checks, at one read of the pipeline's five tables.

Per customer, with (number of rows, sum of amounts):

- ``orders`` = ``orders_by_batch`` = ``orders_by_stream`` = the ledger's ``order`` rows
  (the two siblings copy the root, the join keeps the orders both siblings hold);
- ``payments`` = the ledger's ``payment`` rows.

At a consistent cut (every table at one barrier B) all of it holds: each table holds exactly
the effect of the roots up to B. Read at different barriers it breaks as soon as a root is
ahead of its derived tables by one batch, which is what the head reader shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from metaservice_soak.rows import (
    LEDGER,
    LEDGER_ORDER,
    LEDGER_PAYMENT,
    ORDERS,
    ORDERS_BY_BATCH,
    ORDERS_BY_STREAM,
    PAYMENTS,
)

Figure = tuple[int, int]  # rows, sum of amounts
PerCustomer = dict[int, Figure]


def per_customer(rows: Iterable[tuple[Any, Any]]) -> PerCustomer:
    """(customer, amount) pairs → customer → (rows, sum)."""
    out: PerCustomer = {}
    for customer, amount in rows:
        n, s = out.get(int(customer), (0, 0))
        out[int(customer)] = (n + 1, s + int(amount))
    return out


def totals_from_arrow(tables: Mapping[str, Any]) -> dict[str, PerCustomer]:
    """The invariant's sides from pyarrow tables of the five tables (by full name)."""
    def pairs(name: str, kind: str | None = None) -> Iterable[tuple[Any, Any]]:
        data = tables[name]
        customers = data["customer"].to_pylist()
        amounts = data["amount"].to_pylist()
        if kind is None:
            return zip(customers, amounts, strict=True)
        kinds = data["kind"].to_pylist()
        return ((c, a) for c, a, k in zip(customers, amounts, kinds, strict=True) if k == kind)

    return sides(orders=per_customer(pairs(ORDERS)),
                 payments=per_customer(pairs(PAYMENTS)),
                 batch=per_customer(pairs(ORDERS_BY_BATCH)),
                 stream=per_customer(pairs(ORDERS_BY_STREAM)),
                 ledger_orders=per_customer(pairs(LEDGER, LEDGER_ORDER)),
                 ledger_payments=per_customer(pairs(LEDGER, LEDGER_PAYMENT)))


def sides(*, orders: PerCustomer, payments: PerCustomer, batch: PerCustomer,
          stream: PerCustomer, ledger_orders: PerCustomer,
          ledger_payments: PerCustomer) -> dict[str, PerCustomer]:
    return {"orders": orders, "orders_by_batch": batch, "orders_by_stream": stream,
            "ledger orders": ledger_orders, "payments": payments,
            "ledger payments": ledger_payments}


EQUAL_SIDES = (("orders", "orders_by_batch"), ("orders", "orders_by_stream"),
               ("orders", "ledger orders"), ("payments", "ledger payments"))


def breaches(totals: Mapping[str, PerCustomer]) -> list[str]:
    """What does not hold (empty: the invariant holds)."""
    out = []
    for left, right in EQUAL_SIDES:
        a, b = totals[left], totals[right]
        differing = sorted(c for c in a.keys() | b.keys()
                           if a.get(c, (0, 0)) != b.get(c, (0, 0)))
        if differing:
            c = differing[0]
            out.append(f"{left} != {right} for {len(differing)} customers (customer {c}: "
                       f"{a.get(c, (0, 0))} vs {b.get(c, (0, 0))} rows, sum)")
    return out


def describe(totals: Mapping[str, PerCustomer]) -> dict[str, int]:
    """Rows per side, for the events."""
    return {side: sum(n for n, _s in figures.values()) for side, figures in totals.items()}
