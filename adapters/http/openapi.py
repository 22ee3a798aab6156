"""The OpenAPI 3.1 document of the HTTP API (served at /openapi.json), generated from the route
table and the models: nothing here describes a route or a field by hand.

Schemas come from pydantic in one pass over every model the routes name, the event models of
gateway/events.py included, so the document cannot drift from what the API reads and sends.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, get_args

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.json_schema import JsonSchemaMode

from adapters.http.models import Caller, Idempotency, PathParameters
from adapters.http.replies import Error, Media
from adapters.http.route import Route
from gateway import events

Schema = dict[str, Any]
ParameterPlace = Literal["path", "query", "header"]

API_VERSION: Final = "1.0.0"
_SCHEMAS: Final = "#/components/schemas/"
_PATH_PARAMETER: Final = re.compile(r"{(\w+)}")
# Any route that needs the token can answer these; the open ones only 421.
_ALWAYS: Final = (401, 403, 421, 500, 507)
_ERRORS: Final = {
    400: (
        "BadRequest",
        "Malformed JSON (bad_json), text holding a NUL or a lone surrogate (bad_text), a wrong "
        "field (bad_request) or an invalid session id (bad_session_id).",
    ),
    401: ("Unauthorized", "No bearer token while one is required (unauthorized)."),
    403: (
        "Forbidden",
        "A token that stands for nobody (forbidden), a web page's Origin (cross_origin), or not "
        "the requester nor an admin (not_allowed).",
    ),
    404: ("NotFound", "Unknown session, task or prompt (not_found)."),
    408: ("Timeout", "The body did not arrive in time (timeout)."),
    409: ("Conflict", "The prompt was already answered (already_answered)."),
    413: (
        "TooLarge",
        "Body over 1 MiB (too_large) or content over max_message_chars (too_long).",
    ),
    415: ("UnsupportedMediaType", "A body that is not application/json."),
    422: (
        "IdempotencyMismatch",
        "The Idempotency-Key was sent with another request within 24 hours "
        "(idempotency_mismatch); nothing was done.",
    ),
    421: ("WrongHost", "A Host header naming another server (wrong_host)."),
    429: (
        "TooManyRequests",
        "The sender has max_pending_per_sender tasks waiting or running (too_many_requests), "
        "or reached a quota: messages a minute (rate_limited), a token budget "
        "(budget_exceeded), sessions owned (session_quota, no Retry-After); "
        "Retry-After says when to try again.",
    ),
    500: ("Internal", "Unexpected failure (internal)."),
    503: (
        "Restarting",
        "The gateway shut down before the task ended or asked (restarting); Retry-After says "
        "when to ask again and the message which route (GET /v1/session/{sid}/task/{task_hash}). "
        "Or the archive's database cannot be reached (unavailable): nothing was stored, try again "
        "after Retry-After. Or its connection ended while the request was committed "
        "(outcome_unknown): it may be stored, as the task X-Agenvoy-Session and X-Agenvoy-Task "
        "name; sent again with the same Idempotency-Key, it answers with what was stored.",
    ),
    507: ("StorageFull", "The disk or database is full (storage_full): nothing was stored."),
}
_STRING: Final = TypeAdapter(str).json_schema()


def openapi_document(routes: Sequence[Route], *, token_required: bool = True) -> Schema:
    """The document; without `token_required`, callers may also come without a token (the
    loopback default, where they are anonymous)."""
    schemas = _Schemas(routes)
    paths: dict[str, Schema] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, schemas)
    error_schema = schemas.ref(Error, "serialization")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agenvoy-gateway HTTP API",
            "version": API_VERSION,
            "description": (
                "One agent runtime behind several front-ends; this is the HTTP one. Errors are "
                'always {"error": {"code", "message"}}. Events and the SSE framing are '
                "described in docs/events.md."
            ),
        },
        "security": [{"bearerAuth": []}] if token_required else [],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": (
                        "AGENVOY_API_TOKEN, a token from `agenvoy token add`, or one signed with "
                        "the local credential; it says who the caller is. Required once a token "
                        "is configured or issued."
                    ),
                }
            },
            "responses": {
                name: _content(description, {"application/json": {"schema": error_schema}})
                for name, description in _ERRORS.values()
            },
            "schemas": schemas.components(),
        },
    }


class _Schemas:
    """Every schema the routes need, generated together so that they share definitions."""

    def __init__(self, routes: Iterable[Route]) -> None:
        wanted: dict[tuple[Any, JsonSchemaMode], None] = {(Error, "serialization"): None}
        for route in routes:
            for model in (route.body, route.query):
                if model is not None:
                    wanted[(model, "validation")] = None
            if route.caller:
                wanted[(Caller, "validation")] = None
            if route.idempotent:
                wanted[(Idempotency, "validation")] = None
            if _PATH_PARAMETER.search(route.path):
                wanted[(PathParameters, "validation")] = None
            for _, kind in route.reply_kinds():
                for shown in kind.frames if isinstance(kind, Media) else (kind,):
                    wanted[(shown, "serialization")] = None
        adapters = [(key, mode, TypeAdapter(key)) for key, mode in wanted]
        refs, defs = TypeAdapter.json_schemas(adapters, ref_template=_SCHEMAS + "{model}")
        self._refs = refs
        self._defs: dict[str, Schema] = defs.get("$defs", {})
        self._expanded: set[str] = set()
        _every_event_field_is_sent(self._defs)

    def ref(self, key: Any, mode: JsonSchemaMode) -> Schema:
        return self._refs[(key, mode)]

    def parameters(
        self, model: type[BaseModel], place: ParameterPlace, only: Iterable[str] | None = None
    ) -> list[Schema]:
        """The fields of `model` as parameters; the model itself is no component."""
        name = self.ref(model, "validation")["$ref"].removeprefix(_SCHEMAS)
        self._expanded.add(name)
        schema = self._defs[name]
        required = set(schema.get("required", ()))
        chosen = schema["properties"] if only is None else {n: None for n in only}
        found = []
        for field in chosen:
            field_schema = _never_null(schema["properties"][field])
            description = field_schema.pop("description", "")
            found.append(
                {
                    "name": field,
                    "in": place,
                    "required": place == "path" or field in required,
                    **({"description": description} if description else {}),
                    "schema": field_schema,
                }
            )
        return found

    def components(self) -> Schema:
        return {name: s for name, s in self._defs.items() if name not in self._expanded}


def _never_null(schema: Schema) -> Schema:
    """A parameter's schema without the `null` of an optional field: a parameter left out is
    absent, never null."""
    kept = {k: v for k, v in schema.items() if k != "title"}
    options = kept.get("anyOf", [])
    if {"type": "null"} not in options or kept.get("default", ...) is not None:
        return kept
    del kept["anyOf"], kept["default"]
    rest = [option for option in options if option != {"type": "null"}]
    return {**(rest[0] if len(rest) == 1 else {"anyOf": rest}), **kept}


def _every_event_field_is_sent(defs: dict[str, Schema]) -> None:
    union, *_ = get_args(events.Event)
    for model in get_args(union):
        schema = defs.get(model.__name__)
        if schema is not None:
            schema["required"] = list(schema.get("properties", {}))


def _operation(route: Route, schemas: _Schemas) -> Schema:
    operation: Schema = {
        "operationId": _camel(route.handler.__name__),
        "summary": route.summary,
    }
    description = inspect.getdoc(route.handler)
    if description:
        operation["description"] = description
    if route.public:
        operation["security"] = []
    parameters = []
    if names := _PATH_PARAMETER.findall(route.path):
        parameters += schemas.parameters(PathParameters, "path", names)
    if route.query is not None:
        parameters += schemas.parameters(route.query, "query")
    if route.caller:
        parameters += schemas.parameters(Caller, "header")
    if route.idempotent:
        parameters += schemas.parameters(Idempotency, "header")
    if parameters:
        operation["parameters"] = parameters
    if route.body is not None:
        operation["requestBody"] = {
            "required": not _accepts_empty(route.body),
            "content": {"application/json": {"schema": schemas.ref(route.body, "validation")}},
        }
    responses = {str(status): _reply(route, status, schemas) for status in route.replies}
    errors = {421} if route.public else {*route.errors, *_ALWAYS}
    if route.method != "GET":
        errors.add(415)
    if route.body is not None:
        errors.add(408)
    for status in sorted(errors):
        responses[str(status)] = {"$ref": f"#/components/responses/{_ERRORS[status][0]}"}
    operation["responses"] = responses
    return operation


def _reply(route: Route, status: int, schemas: _Schemas) -> Schema:
    models: list[Schema] = []
    descriptions: list[str] = []
    content: Schema = {}
    for shown, kind in route.reply_kinds():
        if shown != status:
            continue
        if isinstance(kind, Media):
            frames = [schemas.ref(frame, "serialization") for frame in kind.frames]
            described = {**_STRING, "description": kind.description}
            if frames:
                names = ", ".join(f["$ref"].removeprefix(_SCHEMAS) for f in frames)
                described["description"] += f"; frames carry {names}"
                described = _event_frame(described, frames)
            content[kind.content_type] = {"schema": described}
            descriptions.append(kind.description)
        else:
            models.append(schemas.ref(kind, "serialization"))
            descriptions.append((kind.__doc__ or kind.__name__).strip().splitlines()[0])
    if models:
        json_schema = models[0] if len(models) == 1 else {"oneOf": models}
        content = {"application/json": {"schema": json_schema}, **content}
    return _content("; ".join(d.rstrip(".") for d in descriptions), content)


def _event_frame(described: Schema, frames: list[Schema]) -> Schema:
    """One server-sent event (OpenAPI 3.1 describes a stream by its events): its name, id,
    and its data, one JSON document of the named models."""
    return {
        "type": "object",
        "description": described["description"],
        "properties": {
            "event": _STRING,
            "id": _STRING,
            "data": {
                **_STRING,
                "contentMediaType": "application/json",
                "contentSchema": {"anyOf": frames},
            },
        },
        "required": ["event", "data"],
    }


def _content(description: str, content: Schema) -> Schema:
    return {"description": description, "content": content}


def _accepts_empty(model: type[BaseModel]) -> bool:
    try:
        model.model_validate({})
    except ValidationError:
        return False
    return True


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)
