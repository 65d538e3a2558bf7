"""Metadata files in the warehouse, and the object stores that hold them."""
