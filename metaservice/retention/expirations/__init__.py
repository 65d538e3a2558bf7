"""Safe snapshot expiration (docs/contract.md#two-phase-expiration): which snapshots are protected
and why, the two-phase expiration (approve, then complete), and the rule that an approved snapshot
is never handed out or leased again (``handout.py``)."""
