"""The repositories: all of the server's SQL outside its catalog, one module per domain, over
one schema (``db/models.py``). They sit beneath every service and import none: a service that
needs a row of another domain reads it here rather than calling that domain's service."""
