"""The barrier protocol (SPEC §5): root reports, start positions, next, commit, abort."""
