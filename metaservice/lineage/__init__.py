"""Lineage (SPEC §8): the topology, neighbourhoods of a table, exact data lineage."""
