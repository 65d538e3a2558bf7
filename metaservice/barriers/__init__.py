"""The barrier protocol (docs/contract.md#the-barrier-protocol): root reports, start positions,
next, commit, abort."""
