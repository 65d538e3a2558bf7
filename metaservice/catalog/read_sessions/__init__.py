"""The catalog's consistent warehouses and the read sessions that serve them."""
