"""Retention (docs/contract.md#snapshot-usage-and-expiration): what keeps a snapshot and what lets
it go.

- ``leases/``: snapshot leases, a holder reads some snapshots until a deadline;
- ``expirations/``: the two-phase expiration (approve, then complete);
- ``protection.py``: which snapshots must not be expired, and why;
- ``handout.py``: the rule every path that hands out or leases a snapshot follows, an approved
  snapshot is never handed out or leased again.
"""
