"""The invariant ``metaservice-demo`` checks at every read, on tables built by hand: it spans the
sibling jobs of ``orders`` by joining their outputs customer by customer."""

from __future__ import annotations

import pyarrow as pa

from metaservice_demo.demo import ENRICHED, ORDERS, REVENUE, SPEND, figures_from_arrow

ORDERS_ROWS = [(1, 10, 20.0), (2, 10, 5.5), (3, 11, 7.25), (4, 12, 1.0)]  # order, customer, amount
SEGMENT = {10: "retail", 11: "business", 12: "retail"}


def _tables(orders=ORDERS_ROWS, enriched=ORDERS_ROWS, spend_from=ORDERS_ROWS, revenue_from=None):
    def per(rows, key):
        out: dict = {}
        for _, customer, amount in rows:
            k = key(customer)
            n, s = out.get(k, (0, 0.0))
            out[k] = (n + 1, s + amount)
        return out

    spend = per(spend_from, lambda c: c)
    revenue = per(enriched if revenue_from is None else revenue_from, lambda c: SEGMENT[c])
    return {
        ORDERS: pa.table({"order_id": [o for o, _, _ in orders],
                          "customer_id": [c for _, c, _ in orders],
                          "amount": [a for _, _, a in orders]}),
        ENRICHED: pa.table({"order_id": [o for o, _, _ in enriched],
                            "customer_id": [c for _, c, _ in enriched],
                            "segment": [SEGMENT[c] for _, c, _ in enriched],
                            "amount": [a for _, _, a in enriched]}),
        REVENUE: pa.table({"segment": list(revenue), "orders": [n for n, _ in revenue.values()],
                           "revenue": [s for _, s in revenue.values()]}),
        SPEND: pa.table({"customer_id": list(spend), "orders": [n for n, _ in spend.values()],
                         "amount": [s for _, s in spend.values()]}),
    }


def test_one_cut_holds_the_invariant():
    figures = figures_from_arrow(_tables())
    assert figures.holds, figures.breaches()
    assert (figures.orders, figures.enriched, figures.revenue_orders, figures.spend_orders,
            figures.spend_customers) == (4, 4, 4, 4, 3)


def test_a_sibling_at_an_older_barrier_breaks_it_customer_by_customer():
    # customer-spend has not seen order 4 yet (it skipped to an older barrier than enrich-orders)
    figures = figures_from_arrow(_tables(spend_from=ORDERS_ROWS[:3]))
    assert not figures.holds
    assert figures.customers_disagreeing == 1
    assert figures.breaches() == [
        "customer_spend disagrees with orders_enriched for 1 customers (3 orders, Σ 32.75)"]


def test_same_totals_but_different_customers_still_break_it():
    # the sibling's totals agree, but an order is counted for the wrong customer
    moved = [(1, 10, 20.0), (2, 10, 5.5), (3, 12, 7.25), (4, 12, 1.0)]
    figures = figures_from_arrow(_tables(spend_from=moved))
    assert figures.spend_orders == figures.enriched and not figures.holds
    assert figures.customers_disagreeing == 2


def test_unenriched_orders_and_a_stale_revenue_table_break_it():
    figures = figures_from_arrow(_tables(enriched=ORDERS_ROWS[:3], spend_from=ORDERS_ROWS[:3]))
    assert figures.breaches() == ["4 orders but 3 enriched"]
    figures = figures_from_arrow(_tables(revenue_from=ORDERS_ROWS[:2]))
    assert len(figures.breaches()) == 1 and "revenue table sums 2 orders" in figures.breaches()[0]
