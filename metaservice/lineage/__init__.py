"""Lineage (docs/contract.md#lineage): the topology, neighbourhoods of a table, exact data
lineage."""
