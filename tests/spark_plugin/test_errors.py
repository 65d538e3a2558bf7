"""One error contract, server to client: every code the server answers has its own client class,
every exception the plugin raises sits in the tree ``spark_plugin._errors`` draws, and the public
classes present themselves as ``spark_plugin.X``."""

from __future__ import annotations

import ast
import inspect
import pickle
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import metaservice
import metaservice.app  # noqa: F401 - loads every module, so every domain error class exists
import spark_plugin as sp
from metaservice import error_handlers, errors, limits
from spark_plugin import _errors

SERVER_SOURCE = Path(metaservice.__file__).parent
PLUGIN_SOURCE = Path(sp.__file__).parent


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _literal(node: ast.AST | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _hand_built_errors() -> set[tuple[int, str]]:
    """(status, code) of every error body the server builds by hand rather than from a domain
    class: the code argument of the helpers that build one (``error_handlers._error_response``,
    ``limits.send_error``) and ``content={"error": {"code": ...}}`` answers (the probes)."""
    builders = {f.__name__: list(inspect.signature(f).parameters)
                for f in (error_handlers._error_response, limits.send_error)}
    found = set()
    for path in SERVER_SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            keywords = {k.arg: k.value for k in node.keywords}
            if name in builders:
                params = builders[name]
                args = dict(zip(params, node.args, strict=False)) | keywords
                status, code = _literal(args.get("status")), _literal(args.get("code"))
            elif isinstance(keywords.get("content"), ast.Dict):
                status = _literal(keywords.get("status_code"))
                code = _literal(_item(_item(keywords["content"], "error"), "code"))
            else:
                continue
            if isinstance(code, str):
                assert isinstance(status, int), f"{path}: {code} has no literal status"
                found.add((status, code))
    return found


def _item(node: ast.AST | None, key: str) -> ast.AST | None:
    """The value written for ``key`` in a dict display, if ``node`` is one."""
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values, strict=True):
            if _literal(k) == key:
                return v
    return None


def server_codes() -> set[tuple[int, str]]:
    """(status, code) of every error the server can answer, but ``http_error``."""
    domain = {(cls.status_code, cls.code) for cls in _subclasses(errors.MetaServiceError)}
    framework = set(error_handlers.FRAMEWORK_CODES.items())
    return domain | framework | _hand_built_errors()


def test_the_server_codes_are_found() -> None:
    codes = {code for _, code in server_codes()}
    # one of each source: a domain class, an auth class, the framework, a hand-built answer
    assert {"lease_expired", "barrier_not_exact", "barrier_in_future", "token_exists",
            "method_not_allowed", "internal_error", "not_migrated"} <= codes
    assert len(codes) >= 40


@pytest.mark.parametrize(("status", "code"), sorted(server_codes()))
def test_every_server_code_has_its_own_client_class(status: int, code: str) -> None:
    error = _errors.error_from_response(
        status, {"error": {"code": code, "message": "m", "details": {}}})
    cls = type(error)
    assert cls.code == code, f"{status} {code} has no client class (raised as {cls.__name__})"
    assert cls.status_code == status
    assert cls.__name__ in sp.__all__


def test_the_framework_fallback_code_is_raised_as_the_class_of_its_status() -> None:
    fallback = error_handlers.FALLBACK_CODE
    for status, expected in [(405, sp.MethodNotAllowedError), (418, sp.APIError)]:
        error = _errors.error_from_response(status, {"error": {"code": fallback, "message": "m"}})
        assert type(error) is expected
        assert (error.status_code, error.code) == (status, fallback)


def test_the_410_family_shares_one_base_and_keeps_its_members_apart() -> None:
    expired = _errors.error_from_response(410, {"error": {"code": "lease_expired"}})
    assert isinstance(expired, sp.LeaseExpiredError) and isinstance(expired, sp.GoneError)
    assert not isinstance(expired, sp.SnapshotExpiredError)
    assert issubclass(sp.SnapshotExpiredError, sp.GoneError)
    unknown = _errors.error_from_response(410, {"error": {"code": "brand_new_gone"}})
    assert type(unknown) is sp.GoneError


# -- the tree -------------------------------------------------------------------------------


def drawn_tree() -> dict[str, str | None]:
    """``{class name: parent name}`` as the docstring of ``spark_plugin._errors`` draws it."""
    doc = _errors.__doc__ or ""
    block = doc.split("The tree::\n\n", 1)[1].split("\n\n", 1)[0]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        match = re.match(r"^([\s│├└─]*?)([A-Z]\w*Error)\b", line)
        if match is None:
            continue
        depth = len(match.group(1))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match.group(2)] = stack[-1][1] if stack else None
        stack.append((depth, match.group(2)))
    return parents


def public_exceptions() -> list[type[BaseException]]:
    return [v for v in (getattr(sp, n) for n in sp.__all__)
            if isinstance(v, type) and issubclass(v, BaseException)]


def test_the_drawn_tree_is_the_class_hierarchy() -> None:
    drawn = drawn_tree()
    actual = {}
    for cls in public_exceptions():
        bases = [b for b in cls.__bases__ if issubclass(b, sp.MetaServiceError)]
        actual[cls.__name__] = bases[0].__name__ if bases else None
    assert drawn == actual


def test_every_exception_the_plugin_defines_is_in_the_tree() -> None:
    """A public exception class anywhere in ``spark_plugin`` derives from the root and is
    exported; ``raise RuntimeError`` is not how the streaming integration reports a failure."""
    public = {cls.__name__ for cls in public_exceptions()}
    for path in PLUGIN_SOURCE.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = [getattr(b, "id", None) or getattr(b, "attr", "") for b in node.bases]
                if any(b.endswith(("Error", "Exception")) for b in bases):
                    assert node.name in public, f"{path}: {node.name} is outside the tree"
            if "streaming" in path.parts and isinstance(node, ast.Raise):
                raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                assert getattr(raised, "id", None) not in ("RuntimeError", "Exception"), (
                    f"{path}:{node.lineno} raises a bare {raised.id}")  # type: ignore[union-attr]


def test_the_strays_keep_their_builtin_bases() -> None:
    assert issubclass(sp.OptionError, ValueError)
    assert issubclass(sp.OptionError, sp.MetaServiceError)
    assert issubclass(sp.StreamStateError, RuntimeError)
    from spark_plugin.rollback import RollbackNotIncrementalError
    from spark_plugin.streaming.options import OptionError

    assert (RollbackNotIncrementalError, OptionError) == (sp.RollbackNotIncrementalError,
                                                          sp.OptionError)


def _instance(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, sp.APIError):
        return cls("boom", details={"tables": ["a.b.c"]})
    if cls is sp.RollbackNotIncrementalError:
        return cls("boom", {"a.b.c": "expired"})
    return cls("boom")


@pytest.mark.parametrize("cls", public_exceptions(), ids=lambda c: c.__name__)
def test_public_exceptions_present_themselves_as_spark_plugin(cls: type[BaseException]) -> None:
    assert cls.__module__ == "spark_plugin"
    assert getattr(sp, cls.__qualname__) is cls
    error = _instance(cls)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls and str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_the_exception_classes_are_listed_once() -> None:
    """``spark_plugin._errors.__all__`` names every exception class of the module, and the
    package exports exactly those (its imports and ``__all__`` derive from that list)."""
    defined = {name for name, value in vars(_errors).items()
               if isinstance(value, type) and issubclass(value, sp.MetaServiceError)}
    assert sorted(_errors.__all__) == sorted(defined)
    assert {cls.__name__ for cls in public_exceptions()} == defined
    assert all(getattr(sp, name) is getattr(_errors, name) for name in _errors.__all__)
