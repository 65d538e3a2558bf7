"""The hot routes answered without FastAPI's per-request machinery, with the same answers.

FastAPI routes a request by trying its routers one after the other (an included router matches
twice: once to choose it, once inside it) and then solves the endpoint's dependency tree, which
builds caches, exit stacks and a dependency graph walk for every request. On this server that
costs ~0.35 ms of CPU per request, a third of a root report's and of a ``loadTable``'s whole
cost (``/healthz``, which does nothing, spends 0.45 ms in a server process; a bare ASGI app under
the same uvicorn 0.05 ms).

:func:`install` puts one route in front of the app's routes. For the operations it is given
(the barrier protocol's reports, ``next`` and commits, ``POST /versions``, the catalog's loads
and commits) it matches the request's method and path against each one's path template and
runs the **same endpoint function** FastAPI would, with the arguments bound the way FastAPI
binds them, in the same order:

1. the body is read and parsed as JSON when it is declared JSON (a decode error is a 422, as
   FastAPI answers it, before anything else);
2. the app-wide dependencies run: ``refuse_unstorable_input``, then ``authorize``;
3. the endpoint's own dependencies, which only hand over what the app keeps
   (:data:`PROVIDED`), and the principal ``authorize`` found;
4. path, query and header parameters, then the body, are validated by pydantic against the
   endpoint's own annotations; every problem is collected into one ``RequestValidationError``;
5. the endpoint runs (in the thread pool when it is a plain function) and its ``Response`` is
   sent, with any background tasks it was given.

Exceptions leave as they would from the FastAPI route, so the app's error handlers render them
(docs/contract.md#errors, or the Iceberg error model under ``/iceberg``); a body that cannot be read
(the client went away, text that is not UTF-8) is a 400, as FastAPI answers it. Which signatures
qualify is decided when the app is built, and :func:`install` raises on anything it cannot
bind as FastAPI does: a session or other dependency, a cookie, form or file, a parameter that
is neither a model body nor one scalar value, a default that is mutable or given as the
marker, an endpoint not annotated to return a ``Response``; app-wide dependencies other than
the two above, or any added where a router is included; a prefix, a body limit or a
content-type rule of FastAPI's own; an earlier route or mount that could take the same path.
FastAPI's own request telemetry (its OpenTelemetry spans) does not see these requests; the
server's metrics do. A request the front route does not take (another method, a
``HEAD``, any path not listed, an app with dependency overrides) goes on to FastAPI's routing
as before. ``METASERVICE_LEAN_ROUTES=false`` leaves every request to FastAPI;
``tests/metaservice/test_lean_routes.py`` sends the same requests, good and bad, both ways and
compares the answers byte for byte.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import types
import typing
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from email.message import Message
from typing import Any

from fastapi import BackgroundTasks, FastAPI, Request
from fastapi import params as fastapi_params
from fastapi.datastructures import DefaultPlaceholder
from fastapi.exceptions import HTTPException, RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from starlette.concurrency import run_in_threadpool
from starlette.convertors import CONVERTOR_TYPES
from starlette.datastructures import URLPath
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, NoMatchFound, get_route_path
from starlette.types import Receive, Scope, Send

from metaservice.auth.dependencies import authorize
from metaservice.barriers.dependencies import get_root_reports
from metaservice.deps import get_context, get_database, get_transactions, refuse_unstorable_input

PROVIDED: dict[Callable[..., Any], Callable[[Request], Awaitable[Any]]] = {
    get_context: get_context, get_database: get_database,
    get_root_reports: get_root_reports, get_transactions: get_transactions}
"""The endpoint dependencies a lean route binds: each only hands over what the app keeps (an
``async`` function of the request, called as FastAPI would call it)."""

APP_DEPENDENCIES = (refuse_unstorable_input, authorize)
"""The app-wide dependencies, in their order; the app must declare exactly these."""

_MISSING = object()
_LEAN = "metaservice.lean_route"  # the scope key naming the lean route a request matched
_VALIDATED = ("path", "query", "header", "body")
_IMMUTABLE = (type(None), str, int, float, bool, bytes, frozenset, tuple)


class NotLean(Exception):
    """An endpoint whose request this module cannot bind exactly as FastAPI does."""


@dataclass(frozen=True)
class _Parameter:
    name: str  # the endpoint's argument
    source: str  # "path", "query", "header", "body", "request", "tasks", "depends", "principal"
    key: str = ""  # the path parameter, query parameter or header it is read from
    alias: str = ""  # its name in an error's location, as declared
    adapter: TypeAdapter[Any] | None = None
    default: Any = _MISSING
    provide: Callable[[Request], Awaitable[Any]] | None = None


@dataclass(frozen=True)
class LeanRoute:
    """One operation: its FastAPI route (which stays the reference and the OpenAPI entry, and
    whose compiled path it matches), the method it answers, and how its endpoint's arguments
    are bound."""

    route: APIRoute
    method: str
    parameters: tuple[_Parameter, ...]
    reads_body: bool
    is_coroutine: bool

    def match(self, method: str, path: str) -> dict[str, Any] | None:
        if method != self.method:
            return None
        found = self.route.path_regex.match(path)
        if found is None:
            return None
        convertors = self.route.param_convertors
        return {key: convertors[key].convert(value) for key, value in found.groupdict().items()}

    async def respond(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body: Any = _MISSING
        if self.reads_body:
            body = await _json_body(request)
        # APP_DEPENDENCIES, in their order (the bearer scheme ``authorize`` declares, built with
        # ``auto_error=False``, never refuses: ``authorize`` reads the header itself).
        await refuse_unstorable_input(request)
        principal = await authorize(request)
        values: dict[str, Any] = {}
        errors: list[Any] = []
        tasks: BackgroundTasks | None = None
        for parameter in self.parameters:
            if parameter.source == "depends":
                assert parameter.provide is not None
                values[parameter.name] = await parameter.provide(request)
            elif parameter.source == "principal":
                values[parameter.name] = principal
            elif parameter.source == "request":
                values[parameter.name] = request
            elif parameter.source == "tasks":
                values[parameter.name] = tasks = BackgroundTasks()
        for source in _VALIDATED:  # FastAPI's order: path, query, header, then the body
            for parameter in self.parameters:
                if parameter.source != source:
                    continue
                if source == "path":
                    raw = request.path_params.get(parameter.key, _MISSING)
                elif source == "query":
                    raw = request.query_params.get(parameter.key, _MISSING)
                elif source == "header":
                    raw = request.headers.get(parameter.key, _MISSING)
                else:
                    raw = body
                loc: tuple[str, ...] = (source,) if source == "body" else (source, parameter.alias)
                _bind(parameter, raw, loc, values, errors)
        if errors:
            raise RequestValidationError(errors, body=None if body is _MISSING else body)
        endpoint = self.route.endpoint
        if self.is_coroutine:
            response = await endpoint(**values)
        else:
            response = await run_in_threadpool(endpoint, **values)
        if tasks is not None and response.background is None:
            response.background = tasks
        await response(scope, receive, send)


def _bind(parameter: _Parameter, raw: Any, loc: tuple[str, ...], values: dict[str, Any],
          errors: list[Any]) -> None:
    """Validate one value as FastAPI does: a missing value takes the default or is missing; a
    present one is validated by the annotation's pydantic type."""
    if raw is _MISSING:
        if parameter.default is not _MISSING:
            values[parameter.name] = parameter.default
        else:
            errors.append({"type": "missing", "loc": loc, "msg": "Field required",
                           "input": None})
        return
    assert parameter.adapter is not None
    try:
        values[parameter.name] = parameter.adapter.validate_python(raw, from_attributes=True)
    except ValidationError as exc:
        errors.extend({**error, "loc": loc + tuple(error.get("loc", ()))}
                      for error in exc.errors(include_url=False))


async def _json_body(request: Request) -> Any:
    """The body as FastAPI reads it for a JSON body: nothing when empty, the parsed document
    when the content type is JSON, else the bytes themselves (which then fail validation). A
    decode error is a 422; any other failure to read it (the client went away, a body over the
    limit without a declared length, text that is not UTF-8, nesting too deep) a 400."""
    try:
        raw = await request.body()
        if not raw:
            return _MISSING
        content_type = request.headers.get("content-type")
        if content_type and _declares_json(content_type):
            return await request.json()
        return raw
    except json.JSONDecodeError as exc:
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
              "input": {}, "ctx": {"error": exc.msg}}], body=exc.doc) from exc
    except StarletteHTTPException:
        raise
    except Exception as exc:  # noqa: BLE001 - as FastAPI answers it
        raise HTTPException(400, "There was an error parsing the body") from exc


@functools.lru_cache(maxsize=64)
def _declares_json(content_type: str) -> bool:
    """``application/json`` or ``application/…+json``, parameters aside, as FastAPI reads it."""
    message = Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json"))


class LeanRoutes(BaseRoute):
    """The front route: takes a request one of its lean routes answers, else none."""

    def __init__(self, app: FastAPI, routes: Iterable[LeanRoute]) -> None:
        self._app = app
        self._by_method: dict[str, list[LeanRoute]] = {}
        for lean in routes:
            self._by_method.setdefault(lean.method, []).append(lean)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return Match.NONE, {}
        candidates = self._by_method.get(scope["method"])
        if not candidates or self._app.dependency_overrides:
            return Match.NONE, {}
        path = get_route_path(scope)
        for lean in candidates:
            found = lean.match(scope["method"], path)
            if found is not None:
                return Match.FULL, {"endpoint": lean.route.endpoint, "route": lean.route,
                                    "path_params": {**scope.get("path_params", {}), **found},
                                    _LEAN: lean}
        return Match.NONE, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await scope[_LEAN].respond(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        raise NoMatchFound(name, path_params)  # the FastAPI routes behind it name every path


def install(app: FastAPI, operation_ids: Iterable[str]) -> LeanRoutes:
    """Put the front route before the app's routes for ``operation_ids`` (each a route of the
    app with one method besides ``HEAD``). Raises :class:`NotLean` when one cannot be answered
    exactly as FastAPI answers it."""
    declared = tuple(d.dependency for d in app.router.dependencies)
    if declared != APP_DEPENDENCIES:
        raise NotLean(f"the app's dependencies are {declared}, lean routes bind "
                      f"{APP_DEPENDENCIES}")
    if getattr(app.router, "max_body_size", None) is not None:
        raise NotLean("the app has FastAPI's own body size limit")
    routes = list(_routes(app.router.routes, ()))
    by_id = {route.operation_id: (i, contexts) for i, (route, contexts) in enumerate(routes)
             if isinstance(route, APIRoute)}
    chosen: list[LeanRoute] = []
    for operation_id in operation_ids:
        if operation_id not in by_id:
            raise NotLean(f"no route has operation id {operation_id!r}")
        index, contexts = by_id[operation_id]
        route = routes[index][0]
        assert isinstance(route, APIRoute)
        _check_inclusion(route, contexts)
        lean = lean_route(route)
        for earlier, _ in routes[:index]:
            methods = getattr(earlier, "methods", None)
            template = (earlier.path.rstrip("/") + "/{rest:path}" if isinstance(earlier, Mount)
                        else getattr(earlier, "path", None))
            if template is None or (
                    (methods is None or lean.method in methods)
                    and _may_overlap(template, route.path)):
                raise NotLean(f"{template or earlier} comes before {route.path} and may take "
                              "the same requests")
        chosen.append(lean)
    front = LeanRoutes(app, chosen)
    app.router.routes.insert(0, front)
    return front


def _routes(routes: Iterable[Any], contexts: tuple[Any, ...]) -> Iterable[tuple[Any, tuple]]:
    """Every route of the app, with the inclusions it sits in, in the order the router tries
    them (an included router keeps its routes in ``original_router``)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is None:
            yield route, contexts
            continue
        context = getattr(route, "include_context", None)
        if context is None:
            raise NotLean(f"an included router without its inclusion: {route}")
        yield from _routes(inner.routes, (*contexts, context))


def _check_inclusion(route: APIRoute, contexts: tuple[Any, ...]) -> None:
    """The route answers its own path, with the app's dependencies only, FastAPI's default
    content-type rule and no body limit of FastAPI's own, whatever its inclusions add."""
    settings = [route]
    for context in contexts:
        if context.prefix != "":
            raise NotLean(f"{route.path} is included with a prefix")
        added = tuple(d.dependency for d in context.dependencies)
        if added != APP_DEPENDENCIES or context.included_router.dependencies:
            raise NotLean(f"{route.path} is included with dependencies of its own")
        settings += [context, context.included_router]
    for setting in settings:
        strict = getattr(setting, "strict_content_type", True)
        if getattr(setting, "max_body_size", None) is not None or (
                strict.value if isinstance(strict, DefaultPlaceholder) else strict) is not True:
            raise NotLean(f"{route.path} has a body limit or content-type rule of its own")


def _may_overlap(a: str, b: str) -> bool:
    """Whether two path templates may match one path: segment by segment, two literals must be
    equal and a parameter must accept the other's literal (by its convertor's pattern); two
    parameters may; a ``:path`` parameter may take all that follows."""
    left, right = a.strip("/").split("/"), b.strip("/").split("/")
    for x, y in zip(left, right, strict=False):
        if ":path}" in x or ":path}" in y:
            return True
        if not _segments_overlap(x, y):
            return False
    return len(left) == len(right)


def _segments_overlap(x: str, y: str) -> bool:
    if "{" in x and "{" in y:
        return True
    if "{" in y:
        x, y = y, x
    if "{" not in x:
        return x == y
    return re.fullmatch(_segment_pattern(x), y) is not None


def _segment_pattern(segment: str) -> str:
    """A segment template as a regular expression: literals escaped, each parameter its
    convertor's pattern."""
    parts = re.split(r"({[^}]*})", segment)
    return "".join(
        CONVERTOR_TYPES[part[1:-1].partition(":")[2] or "str"].regex if part.startswith("{")
        else re.escape(part) for part in parts)


def lean_route(route: APIRoute) -> LeanRoute:
    methods = set(route.methods or ()) - {"HEAD"}
    if len(methods) != 1:
        raise NotLean(f"{route.path} answers {sorted(methods)}: one method expected")
    if route.dependencies:
        raise NotLean(f"{route.path} has route-level dependencies")
    endpoint = route.endpoint
    hints = typing.get_type_hints(endpoint, include_extras=True)
    returned = hints.get("return")
    if not (inspect.isclass(returned) and issubclass(returned, Response)):
        raise NotLean(f"{route.path}'s endpoint is not annotated to return a Response")
    path_names = set(route.param_convertors)
    parameters: list[_Parameter] = []
    for name, signature_parameter in inspect.signature(endpoint).parameters.items():
        annotation = hints[name]
        default = (_MISSING if signature_parameter.default is inspect.Parameter.empty
                   else signature_parameter.default)
        parameters.append(_parameter(route.path, name, annotation, default, name in path_names))
    bodies = [p for p in parameters if p.source == "body"]
    if len(bodies) > 1:
        raise NotLean(f"{route.path} has {len(bodies)} body parameters")
    return LeanRoute(route, methods.pop(), tuple(parameters), bool(bodies),
                     inspect.iscoroutinefunction(endpoint))


def _parameter(path: str, name: str, annotation: Any, default: Any,
               in_path: bool) -> _Parameter:
    base: Any = annotation
    markers: tuple[Any, ...] = ()
    if typing.get_origin(annotation) is typing.Annotated:
        base, *extra = typing.get_args(annotation)
        markers = tuple(extra)
    if isinstance(default, FieldInfo | fastapi_params.Depends):
        raise NotLean(f"{path}: {name} is declared by its default (use Annotated)")
    marker = next((m for m in markers if isinstance(m, fastapi_params.Depends)), None)
    if marker is not None:
        if not marker.use_cache:
            raise NotLean(f"{path}: {name} depends on {marker.dependency} without its cache")
        if marker.dependency is authorize:
            return _Parameter(name, "principal")
        provide = PROVIDED.get(marker.dependency)  # type: ignore[arg-type]
        if provide is None:
            raise NotLean(f"{path}: {name} depends on {marker.dependency}")
        return _Parameter(name, "depends", provide=provide)
    if base is Request:
        return _Parameter(name, "request")
    if base is BackgroundTasks:
        return _Parameter(name, "tasks")
    fields = [m for m in markers if isinstance(m, FieldInfo)]
    if len(fields) > 1 or any(isinstance(m, fastapi_params.Form | fastapi_params.File
                                          | fastapi_params.Cookie) for m in fields):
        raise NotLean(f"{path}: {name} is a form, file or cookie parameter, or has two markers")
    field = fields[0] if fields else None
    if default is not _MISSING and not isinstance(default, _IMMUTABLE):
        raise NotLean(f"{path}: {name}'s default is not immutable (FastAPI copies it)")
    if field is not None and (field.default not in (PydanticUndefined, Ellipsis)
                              or field.validation_alias not in (None, field.alias)
                              or field.validate_default):
        raise NotLean(f"{path}: {name}'s default or alias is declared in its marker")
    if isinstance(field, fastapi_params.Body) or (
            field is None and inspect.isclass(base) and issubclass(base, BaseModel)):
        if isinstance(field, fastapi_params.Body) and field.embed:
            raise NotLean(f"{path}: {name} is an embedded body")
        return _Parameter(name, "body", adapter=TypeAdapter(annotation), default=default)
    if field is not None and not isinstance(field, fastapi_params.Path | fastapi_params.Query
                                            | fastapi_params.Header):
        raise NotLean(f"{path}: {name} is a {type(field).__name__} parameter")
    if not _scalar(base):
        raise NotLean(f"{path}: {name} is neither a model body nor one scalar value")
    if isinstance(field, fastapi_params.Path) or (field is None and in_path):
        if field is not None and field.alias is not None:
            raise NotLean(f"{path}: path parameter {name} has an alias")
        return _Parameter(name, "path", name, name, TypeAdapter(annotation))
    if isinstance(field, fastapi_params.Header):
        if field.alias is None:
            raise NotLean(f"{path}: header {name} without an alias")
        return _Parameter(name, "header", field.alias.lower(), field.alias, TypeAdapter(annotation),
                          default)
    alias = field.alias if field is not None and field.alias else name
    return _Parameter(name, "query", alias, alias, TypeAdapter(annotation), default)


def _scalar(annotation: Any) -> bool:
    """``str``, ``int``, ``float`` or ``bool``, or an optional one: what FastAPI reads as one
    value of a path, query string or header (a list or a model it reads otherwise)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return all(arg is type(None) or _scalar(arg) for arg in typing.get_args(annotation))
    return annotation in (str, int, float, bool)
