"""The catalog's tables: list, load, create, register, drop, rename, and their commits."""
