"""The head's answers to the namespace reads (HTTP only) that a read session's routes give as
well (list, load, exists, and a namespace's functions), shared by ``endpoints.py`` and
``read_sessions/endpoints.py``."""

from __future__ import annotations

from typing import Any

from fastapi import Response
from sqlalchemy.orm import Session

from metaservice.catalog import pages
from metaservice.catalog.deps import levels
from metaservice.catalog.namespaces import service as namespaces


def list_namespaces(session: Session, parent: str | None = None, page_token: str | None = None,
                    page_size: int | None = None) -> dict[str, Any]:
    """Namespaces in name order; with ``pageToken`` (empty to start) a page at a time."""
    found, token = namespaces.list_namespaces(
        session, levels(parent) if parent else None, pages.page(page_token, page_size))
    return {"namespaces": found, "next-page-token": token}


def load_namespace(session: Session, namespace: str) -> dict[str, Any]:
    return {"namespace": levels(namespace),
            "properties": namespaces.load_namespace(session, levels(namespace))}


def namespace_exists(session: Session, namespace: str) -> Response:
    namespaces.load_namespace(session, levels(namespace))
    return Response(status_code=204)


def list_functions(session: Session, namespace: str, page_token: str | None = None,
                   page_size: int | None = None) -> dict[str, Any]:
    """The namespace's functions: none (the catalog holds no function); 404 for a namespace
    that does not exist."""
    names = namespaces.list_functions(session, levels(namespace),
                                      pages.page(page_token, page_size))
    return {"identifiers": [[*levels(namespace), name] for name in names],
            "next-page-token": None}


def load_function(session: Session, namespace: str, function: str) -> dict[str, Any]:
    """404 ``NoSuchFunctionException`` (the catalog holds no function), or
    ``NoSuchNamespaceException`` for a namespace that does not exist."""
    namespaces.load_function(session, levels(namespace), function)
    return {}  # never reached: load_function raises
