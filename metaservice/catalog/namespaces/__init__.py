"""The catalog's namespaces (one level each, a MetaService database) and its configuration
route."""
