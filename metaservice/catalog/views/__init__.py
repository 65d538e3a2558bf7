"""Iceberg views, the SQL objects of the Iceberg view specification (not to be confused with
consistent warehouses, ``read_sessions``)."""
