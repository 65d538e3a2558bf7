"""MetaService: consistent versions across Iceberg tables written by many Spark jobs."""

__version__ = "0.1.0"
