"""The OpenAPI 3.1 description of the HTTP API (served at /openapi.json).

Paths, bodies and answers are written out here; the event schemas are generated from the
event models in gateway/events.py, so the document cannot drift from what the streams send.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Final, get_args

from gateway.engine.task import TaskStatus
from gateway.events import EVENT_ADAPTER

Schema = dict[str, Any]

API_VERSION: Final = "1.0.0"
_SCHEMAS: Final = "#/components/schemas/"


def _ref(name: str) -> Schema:
    return {"$ref": f"{_SCHEMAS}{name}"}


def _response(ref: str) -> Schema:
    return {"$ref": f"#/components/responses/{ref}"}


def _json(description: str, schema: Schema) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _body(schema: Schema, *, required: bool = True) -> Schema:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Schema]:
    """Error answers of an authenticated route: the listed ones plus 401, 403 and 500."""
    names = {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        409: "Conflict",
        413: "TooLarge",
        500: "Internal",
    }
    return {str(s): _response(names[s]) for s in sorted({*statuses, 401, 403, 500})}


def _query(name: str, schema: Schema, description: str, *, required: bool = False) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema,
    }


def _obj(properties: dict[str, Schema], *, required: list[str] | None = None) -> Schema:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
    }


_STR: Final[Schema] = {"type": "string"}
_INT: Final[Schema] = {"type": "integer"}
_BOOL: Final[Schema] = {"type": "boolean"}
_MS: Final[Schema] = {"type": "integer", "description": "Unix time in milliseconds"}
_SESSION_ID: Final[Schema] = {
    "type": "string",
    "pattern": "^(cli|chat|dc|tg|temp)-[A-Za-z0-9_-]{1,128}$",
    "examples": ["cli-3f2a9c1e-0d4b-4e59-9a57-6f1b0c8d2e11"],
}
_SSE: Final[Schema] = {
    "schema": {
        "type": "string",
        "description": "Server-sent events; the framing is described in docs/events.md.",
    }
}
_STATUSES: Final[list[str]] = list(get_args(TaskStatus))
_SENDER_HEADERS: Final[list[Schema]] = [
    {"$ref": "#/components/parameters/Sender"},
    {"$ref": "#/components/parameters/SenderName"},
    {"$ref": "#/components/parameters/Window"},
    {"$ref": "#/components/parameters/Client"},
]
_SESSION_PATH: Final[list[Schema]] = [{"$ref": "#/components/parameters/SessionId"}]
_TASK_PATH: Final[list[Schema]] = [
    {"$ref": "#/components/parameters/SessionId"},
    {"$ref": "#/components/parameters/TaskHash"},
]


def _event_schemas() -> dict[str, Schema]:
    """Each event model, plus `Event`, the union told apart by `kind`."""
    generated = EVENT_ADAPTER.json_schema(mode="serialization", ref_template=_SCHEMAS + "{model}")
    schemas: dict[str, Schema] = {}
    for name, schema in generated.pop("$defs", {}).items():
        # Every field is always sent, defaults included.
        schema["required"] = list(schema.get("properties", {}))
        schemas[name] = schema
    schemas["Event"] = generated
    return schemas


def _schemas() -> dict[str, Schema]:
    origin = _obj(
        {
            "platform": _STR,
            "channel_id": _STR,
            "reply_to": _STR,
            "sender_id": _STR,
            "sender_name": _STR,
            "is_admin": _BOOL,
            "window_hash": _STR,
        }
    )
    prompt = _obj(
        {
            "kind": {"type": "string", "enum": ["confirm", "ask_user"]},
            "session_id": _SESSION_ID,
            "task_hash": _STR,
            "origin": _ref("Origin"),
            "expires_at": _MS,
            "tool": _STR,
            "args": {"type": "object"},
            "question": _STR,
            "options": {"type": "array", "items": _STR},
        }
    )
    status = {"type": "string", "enum": _STATUSES}
    events = {"type": "array", "items": _ref("Event")}
    task_view = _obj(
        {
            "session_id": _SESSION_ID,
            "task_hash": _STR,
            "status": _ref("TaskStatus"),
            "text": _STR,
            "error": _STR,
            "pending": {"oneOf": [_ref("Prompt"), {"type": "null"}]},
            "events": events,
        }
    )
    return {
        "Error": _obj(
            {
                "error": _obj(
                    {
                        "code": {
                            "type": "string",
                            "examples": ["bad_json", "bad_session_id", "not_found"],
                        },
                        "message": _STR,
                    }
                )
            }
        ),
        "Origin": origin,
        "Prompt": prompt,
        "TaskStatus": status,
        "TaskView": task_view,
        "CreateSessionRequest": _obj(
            {"prefix": {"type": "string", "enum": ["cli", "chat"], "default": "cli"}},
            required=[],
        ),
        "CreatedSession": _obj({"session_id": _SESSION_ID}),
        "Inputs": _obj({"inputs": {"type": "array", "items": _STR}}),
        "UpdateSessionRequest": {
            **_obj(
                {
                    "name": {"type": "string", "maxLength": 200},
                    "persona": _STR,
                    "model": {"type": "string", "maxLength": 200},
                    "reasoning": {"type": "string", "enum": ["", "low", "medium", "high"]},
                    "allowed_tools": {
                        "type": "array",
                        "maxItems": 64,
                        "items": _STR,
                        "description": "Tools that run without asking for confirmation.",
                    },
                },
                required=[],
            ),
            "additionalProperties": False,
        },
        "SendRequest": _obj(
            {
                "content": {"type": "string", "minLength": 1},
                "session_id": _SESSION_ID,
                "persist": {
                    "type": "boolean",
                    "default": False,
                    "description": "Without session_id: a new chat-* session instead of temp-*.",
                },
                "stream": {
                    "type": "boolean",
                    "default": False,
                    "description": "Answer with the task's events as text/event-stream.",
                },
                "wait": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 300,
                    "default": 300,
                    "description": "Seconds to wait for the task to end or ask something.",
                },
            },
            required=["content"],
        ),
        "CommandResult": _obj(
            {"session_id": _SESSION_ID, "command": _STR, "ok": _BOOL, "text": _STR}
        ),
        "SendFinished": _obj(
            {
                "session_id": _SESSION_ID,
                "task_hash": _STR,
                "status": _ref("TaskStatus"),
                "text": _STR,
                "error": _STR,
                "events": events,
            }
        ),
        "SendPending": _obj(
            {
                "session_id": _SESSION_ID,
                "task_hash": _STR,
                "status": _ref("TaskStatus"),
                "pending": _ref("Prompt"),
            }
        ),
        "SendAccepted": _obj(
            {"session_id": _SESSION_ID, "task_hash": _STR, "status": _ref("TaskStatus")}
        ),
        "SessionSummary": _obj(
            {
                "session_id": _SESSION_ID,
                "name": _STR,
                "updated_at": _MS,
                "message_count": _INT,
                "running": _BOOL,
            }
        ),
        "SessionMeta": _obj(
            {
                "session_id": _SESSION_ID,
                "name": _STR,
                "persona": _STR,
                "model": _STR,
                "reasoning": _STR,
                "allowed_tools": {"type": "array", "items": _STR},
                "created_at": _MS,
                "updated_at": _MS,
                "running": _BOOL,
                "queued": _INT,
            }
        ),
        "Message": _obj(
            {
                "id": _INT,
                "session_id": _SESSION_ID,
                "role": _STR,
                "content": _STR,
                "sender": _STR,
                "send_at": _MS,
                "task_hash": _STR,
            }
        ),
        "LogRecord": _obj(
            {
                "at": _MS,
                "window_hash": _STR,
                "kind": _STR,
                "task_hash": _STR,
                "body": {"type": "string", "description": "The event's own fields as JSON."},
            }
        ),
        "AnswerRequest": {
            "oneOf": [
                _obj({"approve": _BOOL}),
                _obj({"answer": _STR}),
            ],
            "description": "approve answers a confirmation, answer a question.",
        },
        "AnswerResult": {
            "type": "object",
            "properties": {
                "answered": {"const": True},
                "approved": _BOOL,
                "answer": _STR,
                "by": _STR,
            },
            "required": ["answered", "by"],
        },
        "ModelUsage": _obj(
            {
                "model": _STR,
                "calls": _INT,
                "input": _INT,
                "output": _INT,
                "cache_read": _INT,
                "cache_write": _INT,
                "elapsed_ms": _INT,
                "output_tps": {"type": "number"},
            }
        ),
        **_event_schemas(),
    }


def _error_response(description: str, headers: Schema | None = None) -> Schema:
    response = _json(description, _ref("Error"))
    if headers:
        response["headers"] = headers
    return response


def _components() -> Schema:
    return {
        "securitySchemes": {
            "bearerAuth": {
                "type": "http",
                "scheme": "bearer",
                "description": "AGENVOY_API_TOKEN; enforced only when it is set.",
            }
        },
        "parameters": {
            "SessionId": {
                "name": "sid",
                "in": "path",
                "required": True,
                "schema": _SESSION_ID,
            },
            "TaskHash": {"name": "task_hash", "in": "path", "required": True, "schema": _STR},
            "Sender": {
                "name": "X-Agenvoy-Sender",
                "in": "header",
                "required": False,
                "description": "Sender id (default http); a claim, not a credential.",
                "schema": {"type": "string", "maxLength": 128},
            },
            "SenderName": {
                "name": "X-Agenvoy-Sender-Name",
                "in": "header",
                "required": False,
                "description": "Display name (default: the sender id).",
                "schema": {"type": "string", "maxLength": 128},
            },
            "Window": {
                "name": "X-Agenvoy-Window",
                "in": "header",
                "required": False,
                "description": "Window hash of the client; minted per request when absent.",
                "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
            },
            "Client": {
                "name": "X-Agenvoy-Client",
                "in": "header",
                "required": False,
                "description": (
                    "`terminal` for the full-screen client: its prompts can then be answered "
                    "from the window that started the task only (or by an admin)."
                ),
                "schema": {"type": "string", "enum": ["http", "terminal"], "default": "http"},
            },
        },
        "responses": {
            "BadRequest": _error_response(
                "Malformed JSON (bad_json), a wrong field (bad_request) or an invalid session "
                "id (bad_session_id)."
            ),
            "Unauthorized": _error_response(
                "No bearer token (unauthorized).",
                {"WWW-Authenticate": {"schema": {"type": "string"}}},
            ),
            "Forbidden": _error_response(
                "Wrong bearer token (forbidden), or not the sender nor an admin (not_allowed)."
            ),
            "NotFound": _error_response("Unknown session, task or prompt (not_found)."),
            "Conflict": _error_response("The prompt was already answered (already_answered)."),
            "TooLarge": _error_response(
                "Body over 1 MiB (too_large) or content over max_message_chars (too_long)."
            ),
            "Internal": _error_response("Unexpected failure (internal)."),
        },
        "schemas": _schemas(),
    }


def _paths() -> Schema:
    return {
        "/v1/session": {
            "post": {
                "operationId": "createSession",
                "summary": "Create a cli-* or chat-* session",
                "parameters": _SENDER_HEADERS,
                "requestBody": _body(_ref("CreateSessionRequest"), required=False),
                "responses": {
                    "201": _json("The new session", _ref("CreatedSession")),
                    **_errors(400, 413),
                },
            }
        },
        "/v1/send": {
            "post": {
                "operationId": "send",
                "summary": "Send a message (or a gateway command) to a session",
                "description": (
                    "Without session_id a new temp-* session (chat-* with persist). A gateway "
                    "command answers at once. Otherwise waits up to `wait` seconds; with "
                    "stream the task's events come as text/event-stream until done, error or "
                    "canceled, and a client that leaves does not cancel the task."
                ),
                "parameters": _SENDER_HEADERS,
                "requestBody": _body(_ref("SendRequest")),
                "responses": {
                    "200": {
                        "description": "The task ended, or the content was a gateway command",
                        "content": {
                            "application/json": {
                                "schema": {"oneOf": [_ref("SendFinished"), _ref("CommandResult")]}
                            },
                            "text/event-stream": _SSE,
                        },
                    },
                    "202": _json(
                        "The task waits for an answer, or is still running",
                        {"oneOf": [_ref("SendPending"), _ref("SendAccepted")]},
                    ),
                    **_errors(400, 413),
                },
            }
        },
        "/v1/sessions": {
            "get": {
                "operationId": "listSessions",
                "summary": "Sessions, most recently active first",
                "parameters": [
                    _query(
                        "prefix",
                        {"type": "string", "enum": ["cli", "chat", "dc", "tg", "temp"]},
                        "Only sessions with this prefix.",
                    )
                ],
                "responses": {
                    "200": _json(
                        "The sessions",
                        _obj({"sessions": {"type": "array", "items": _ref("SessionSummary")}}),
                    ),
                    **_errors(400),
                },
            }
        },
        "/v1/session/{sid}": {
            "parameters": _SESSION_PATH,
            "get": {
                "operationId": "getSession",
                "summary": "A session's settings and state",
                "responses": {
                    "200": _json("The session", _ref("SessionMeta")),
                    **_errors(400, 404),
                },
            },
            "put": {
                "operationId": "updateSession",
                "summary": "Rename the session or change its persona, model, reasoning or tools",
                "description": (
                    "Only the fields given change; an empty string restores the default. "
                    "In dc-* and tg-* sessions only admins may change anything but the name."
                ),
                "parameters": _SENDER_HEADERS,
                "requestBody": _body(_ref("UpdateSessionRequest")),
                "responses": {
                    "200": _json("The updated session", _ref("SessionMeta")),
                    **_errors(400, 404, 413),
                },
            },
            "delete": {
                "operationId": "deleteSession",
                "summary": "Cancel the session's tasks, then delete its rows and files",
                "parameters": _SENDER_HEADERS,
                "responses": {
                    "200": _json("Deleted", _obj({"deleted": {"const": True}})),
                    **_errors(400, 404),
                },
            },
        },
        "/v1/session/{sid}/history": {
            "parameters": _SESSION_PATH,
            "get": {
                "operationId": "getHistory",
                "summary": "The latest archived messages, oldest first",
                "parameters": [
                    _query(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
                        "How many messages.",
                    )
                ],
                "responses": {
                    "200": _json(
                        "The messages",
                        _obj({"messages": {"type": "array", "items": _ref("Message")}}),
                    ),
                    **_errors(400, 404),
                },
            },
        },
        "/v1/session/{sid}/log": {
            "parameters": _SESSION_PATH,
            "get": {
                "operationId": "streamLog",
                "summary": "The session's action.log tail, then its live events (SSE)",
                "description": (
                    "First `log` frames (data: a LogRecord) for the last `tail` records, then "
                    "the comment `: live`, then one frame per live event of the session, until "
                    "the client leaves. `: dropped N` reports events lost to a slow reader."
                ),
                "parameters": [
                    _query(
                        "tail",
                        {"type": "integer", "minimum": 0, "maximum": 1000, "default": 100},
                        "How many action.log records to replay first.",
                    )
                ],
                "responses": {
                    "200": {
                        "description": "The event stream",
                        "content": {"text/event-stream": _SSE},
                    },
                    **_errors(400, 404),
                },
            },
        },
        "/v1/session/{sid}/pending": {
            "parameters": _SESSION_PATH,
            "get": {
                "operationId": "listPending",
                "summary": "Open confirmations and questions of the session",
                "responses": {
                    "200": _json(
                        "The open prompts, soonest to expire first",
                        _obj({"pending": {"type": "array", "items": _ref("Prompt")}}),
                    ),
                    **_errors(400, 404),
                },
            },
        },
        "/v1/pending": {
            "get": {
                "operationId": "listAllPending",
                "summary": "Open prompts in every session that the sender may answer",
                "parameters": _SENDER_HEADERS,
                "responses": {
                    "200": _json(
                        "The open prompts, soonest to expire first",
                        _obj({"pending": {"type": "array", "items": _ref("Prompt")}}),
                    ),
                    **_errors(400),
                },
            },
        },
        "/v1/session/{sid}/inputs": {
            "parameters": _SESSION_PATH,
            "get": {
                "operationId": "listInputs",
                "summary": "The terminal input history of the session (.cmd_history)",
                "responses": {
                    "200": _json("Oldest first, at most 50", _ref("Inputs")),
                    **_errors(400, 404),
                },
            },
            "post": {
                "operationId": "addInput",
                "summary": "Remember a typed line (a repeat of the last one is not stored)",
                "requestBody": _body(_obj({"entry": {"type": "string", "minLength": 1}})),
                "responses": {
                    "200": _json("The history after the change", _ref("Inputs")),
                    **_errors(400, 404, 413),
                },
            },
        },
        "/v1/session/{sid}/pending/{task_hash}": {
            "parameters": _TASK_PATH,
            "post": {
                "operationId": "answerPrompt",
                "summary": "Answer a task's confirmation or question",
                "description": "Only the sender who started the task, or an admin, may answer.",
                "parameters": _SENDER_HEADERS,
                "requestBody": _body(_ref("AnswerRequest")),
                "responses": {
                    "200": _json("Answered", _ref("AnswerResult")),
                    **_errors(400, 404, 409, 413),
                },
            },
        },
        "/v1/session/{sid}/task/{task_hash}": {
            "parameters": _TASK_PATH,
            "get": {
                "operationId": "getTask",
                "summary": "A task's state and events; optionally long-polls",
                "parameters": [
                    _query(
                        "wait",
                        {"type": "number", "minimum": 0, "maximum": 300},
                        "Seconds to wait for the task to end or ask something.",
                    )
                ],
                "responses": {
                    "200": _json("The task", _ref("TaskView")),
                    **_errors(400, 404),
                },
            },
        },
        "/v1/session/{sid}/cancel/{task_hash}": {
            "parameters": _TASK_PATH,
            "post": {
                "operationId": "cancelTask",
                "summary": "Cancel a queued or running task",
                "description": "Only the sender who started the task, or an admin, may cancel.",
                "parameters": _SENDER_HEADERS,
                "responses": {
                    "200": _json(
                        "Whether the task was canceled (false: it had already ended)",
                        _obj({"canceled": _BOOL}),
                    ),
                    **_errors(400, 404),
                },
            },
        },
        "/v1/search": {
            "get": {
                "operationId": "search",
                "summary": "Messages containing every term of q, newest first",
                "parameters": [
                    _query("q", {"type": "string", "minLength": 1}, "Search terms.", required=True),
                    _query("session_id", _SESSION_ID, "Only this session."),
                    _query(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": 200, "default": 20},
                        "Page size.",
                    ),
                    _query(
                        "offset",
                        {"type": "integer", "minimum": 0, "maximum": 10000, "default": 0},
                        "Results to skip.",
                    ),
                ],
                "responses": {
                    "200": _json(
                        "The matches",
                        _obj({"results": {"type": "array", "items": _ref("Message")}}),
                    ),
                    **_errors(400),
                },
            }
        },
        "/v1/usage": {
            "get": {
                "operationId": "usage",
                "summary": "Token spend per model",
                "parameters": [
                    _query(
                        "days",
                        {"type": "integer", "minimum": 1, "maximum": 3650, "default": 28},
                        "How many days back.",
                    )
                ],
                "responses": {
                    "200": _json(
                        "Usage per model",
                        _obj({"models": {"type": "array", "items": _ref("ModelUsage")}}),
                    ),
                    **_errors(400),
                },
            }
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness; never needs a token",
                "security": [],
                "responses": {
                    "200": _json("Up", _obj({"status": {"type": "string", "const": "ok"}}))
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus text exposition (version 0.0.4)",
                "responses": {
                    "200": {
                        "description": "Gauges, counters and the request-duration histogram",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_errors(),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "responses": {
                    "200": _json("OpenAPI 3.1 document", {"type": "object"}),
                    **_errors(),
                },
            }
        },
    }


@functools.cache
def _document() -> Schema:
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
        "security": [{"bearerAuth": []}],
        "paths": _paths(),
        "components": _components(),
    }


def openapi_document() -> Schema:
    """A fresh copy of the document (callers may change theirs)."""
    return copy.deepcopy(_document())
