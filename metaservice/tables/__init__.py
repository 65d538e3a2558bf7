"""Iceberg tables known to the service, and their completed barriers."""
