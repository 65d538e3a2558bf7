"""Server-side scan planning (docs/contract.md#scan-planning)."""
