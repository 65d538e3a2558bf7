"""Consistent versions (SPEC §4): strong, weak and explicit-barrier cuts."""
