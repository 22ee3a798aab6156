"""Reading a request's body, query string and headers into the models of `models.py`.

Malformed JSON answers 400 `bad_json`; text that cannot be stored 400 `bad_text`; anything else
the model refuses answers 400 `bad_request`, with a message that names the field. A body that
does not arrive within AGENVOY_HTTP_BODY_TIMEOUT_SECONDS answers 408 `timeout`. An empty body
reads as `{}`; an empty query parameter as one not given.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from adapters.http.errors import ApiError

M = TypeVar("M", bound=BaseModel)
Source = Literal["field", "query parameter", "header", "argument"]


async def read_body(request: web.Request, model: type[M], within: float) -> M:
    """The body as `model`. Past the app's size cap aiohttp answers 413 first."""
    raw = await read_raw(request, within)
    try:
        return model.model_validate_json(raw if raw.strip() else b"{}")
    except ValidationError as exc:
        raise _refused(exc, "field") from None


async def read_raw(request: web.Request, within: float) -> bytes:
    """The body's bytes, if they arrive within `within` seconds."""
    try:
        async with asyncio.timeout(within):
            raw = await request.read()
    except TimeoutError:
        # What the client sent so far is unread: the connection cannot carry another request.
        if request.transport is not None:
            request.transport.close()
        raise ApiError(408, "timeout", f"the body did not arrive within {within:g} s") from None
    return raw


def read_arguments(model: type[M], arguments: Mapping[str, Any]) -> M:
    """A tool's arguments (adapters/mcp/) as `model`, read as strictly as a body."""
    try:
        return model.model_validate_json(json.dumps(arguments))
    except ValidationError as exc:
        raise _refused(exc, "argument") from None


def read_query(request: web.Request, model: type[M]) -> M:
    # The first of repeated parameters counts, as in aiohttp's `query.get`.
    return _read(model, {name: request.query[name] for name in request.query}, "query parameter")


def read_headers(request: web.Request, model: type[M]) -> M:
    """Unlike a query parameter, a header sent empty is read, and refused if it must not be."""
    names = (field.alias or name for name, field in model.model_fields.items())
    given = {name: request.headers[name].strip() for name in names if name in request.headers}
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        raise _refused(exc, "header") from None


def _read(model: type[M], values: Mapping[str, str], source: Source) -> M:
    # Only blank parameters count as absent: `q=%1C` searches for that character.
    given = {name: value for name, value in values.items() if value.strip(" \t")}
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        raise _refused(exc, source) from None


def _refused(exc: ValidationError, source: Source) -> ApiError:
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    if any(error["type"] == "json_invalid" for error in errors):
        message = errors[0]["msg"].removeprefix("Invalid JSON: ")
        return ApiError(400, "bad_json", f"the request body is not valid JSON: {message}")
    code = "bad_text" if any(error["type"] == "bad_text" for error in errors) else "bad_request"
    return ApiError(400, code, "; ".join(_describe(errors, source)))


def _describe(errors: Iterable[ErrorDetails], source: Source) -> Iterable[str]:
    for error in errors:
        message = error["msg"].removeprefix("Value error, ")
        name = ".".join(str(part) for part in error["loc"])
        if not name:
            whole = error["type"] == "model_type"
            yield "the request body must be a JSON object" if whole else message
        elif error["type"] == "missing":
            yield f"{source} '{name}' is required"
        elif error["type"] == "extra_forbidden":
            yield f"unknown {source} '{name}'"
        else:
            yield f"{source} '{name}': {message}"
