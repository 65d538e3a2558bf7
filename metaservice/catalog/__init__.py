"""The built-in Apache Iceberg REST catalog (docs/contract.md#the-built-in-catalog), served under
``/iceberg``.

By concept, each a folder with the roles of the server's domains (``endpoints.py`` HTTP only,
``service.py`` the rules, ``repository.py`` all SQL), layered as pyproject.toml's
``catalog-layers`` contract holds:

- ``namespaces/``: the configuration route and the namespaces (``endpoints``, ``answers`` the
  reads a read session gives too, ``service``, ``repository``);
- ``tables/``: list, load, create, register, drop, rename (``endpoints``, ``answers`` table
  answers with their ``ETag``, ``idempotent`` mutations under an ``Idempotency-Key``,
  ``service``); commits (``commit_endpoints``, ``commits`` staging with pyiceberg and the
  pointer swap, ``commit_rules`` the trust rules and the barrier, expiration and rollback
  services a commit completes, ``changes`` pure: the staged commit and what it changes);
  ``claims`` (a table's uuid and the locations it claims), ``owners`` (who acts for a running
  job), ``validation`` (pure: input that makes no valid table), ``repository`` (pointers,
  claims, table rows, cut files);
- ``views/``: Iceberg views, the SQL objects (``endpoints``, ``service``, ``rules`` pure,
  ``repository``);
- ``read_sessions/``: consistent warehouses and their read sessions (``endpoints``,
  ``service``, ``consistent_warehouses`` pure, ``repository``);
- ``storage/``: metadata files in the warehouse (``warehouse``) and the object stores that hold
  them (``object_store``).

The catalog's base, shared by them: ``endpoints.py`` (mounts the routers), ``config.py`` (the
endpoints ``/v1/config`` lists), ``deps.py`` (what a route reads of its request),
``error_rendering.py`` (the Iceberg error renderer), ``errors.py`` (the Iceberg error model),
``requests.py`` (the typed request bodies), ``schemas.py`` (response documents, list
parameters), ``site.py`` (the catalog's identity and name rules), ``idempotency.py`` and
``idempotency_repository.py``, ``pages.py``.
"""
