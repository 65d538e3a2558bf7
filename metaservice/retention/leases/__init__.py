"""Snapshot leases (docs/contract.md#leases): a holder reads some snapshots until a deadline; while
a lease is live none of its snapshots can be approved for expiration."""
