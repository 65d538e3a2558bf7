"""Consistent versions (docs/contract.md#strong): strong, weak and explicit-barrier cuts."""
