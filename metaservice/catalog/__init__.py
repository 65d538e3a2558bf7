"""The built-in Apache Iceberg REST catalog (SPEC §11), served under ``/iceberg``.

- ``endpoints.py``: the HTTP routes of the Iceberg REST specification, and nothing else;
- ``service.py``: namespaces, tables and commits, and the MetaService rules a commit obeys;
- ``changes.py``: what a commit changes (pure: added snapshots, removed ones, ``main`` moves);
- ``storage.py``: metadata files in the warehouse through pyiceberg's FileIO;
- ``repository.py``: namespace rows and table pointers (compare-and-swap);
- ``errors.py``: the Iceberg error model.
"""
