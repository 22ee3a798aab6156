"""Every operation of the API in one table: method, path, handler, what it reads and what it
answers. The app serves exactly these, and the OpenAPI document is generated from them."""

from __future__ import annotations

from typing import Final

from adapters.http.archive import get_history, stream_log, usage
from adapters.http.commands import list_commands
from adapters.http.models import (
    AddInputRequest,
    AnswerRequest,
    CreateSessionRequest,
    HistoryQuery,
    LogQuery,
    SearchQuery,
    SendRequest,
    SessionsQuery,
    TaskQuery,
    UpdateSessionRequest,
    UsageQuery,
)
from adapters.http.operations import healthz, metrics, openapi
from adapters.http.prompts import (
    answer_prompt,
    cancel_task,
    get_task,
    list_all_pending,
    list_pending,
)
from adapters.http.replies import (
    LOG_STREAM,
    METRICS_TEXT,
    TASK_STREAM,
    Answered,
    Approved,
    Canceled,
    CommandList,
    CommandResult,
    CreatedSession,
    Deleted,
    Health,
    HealthUnavailable,
    Inputs,
    Messages,
    OpenApiDocument,
    PendingList,
    SendAccepted,
    SendFinished,
    SendPending,
    SessionList,
    SessionMeta,
    TaskView,
    UsageList,
)
from adapters.http.route import Route
from adapters.http.schedules import (
    ScheduleList,
    ScheduleRequest,
    ScheduleView,
    Unscheduled,
    create_schedule,
    delete_schedule,
    list_schedules,
)
from adapters.http.search import SearchHits, search
from adapters.http.send import send
from adapters.http.sessions import (
    add_input,
    create_session,
    delete_session,
    get_session,
    list_inputs,
    list_sessions,
    update_session,
)
from gateway.auth import Access

SESSION: Final = "/v1/session/{sid}"
TASK: Final = "{task_hash}"

ROUTES: Final[tuple[Route, ...]] = (
    # -- sessions
    Route(
        "POST",
        "/v1/session",
        create_session,
        "Create a cli-* or chat-* session",
        body=CreateSessionRequest,
        replies={201: CreatedSession},
        errors=(400, 413),
    ),
    Route(
        "GET",
        "/v1/sessions",
        list_sessions,
        "Sessions, most recently active first",
        query=SessionsQuery,
        replies={200: SessionList},
        errors=(400,),
    ),
    Route(
        "GET",
        SESSION,
        get_session,
        "A session's settings and state",
        replies={200: SessionMeta},
        errors=(400, 404),
    ),
    Route(
        "PUT",
        SESSION,
        update_session,
        "Rename the session or change its persona, model, reasoning or tools",
        body=UpdateSessionRequest,
        caller=True,
        access=Access.shared_admin,
        checked_by="session settings: anyone may rename",
        replies={200: SessionMeta},
        errors=(400, 404, 413),
    ),
    Route(
        "DELETE",
        SESSION,
        delete_session,
        "Delete the session: cancel its tasks, then remove its rows and files",
        caller=True,
        access=Access.shared_admin,
        replies={200: Deleted},
        errors=(400, 404),
    ),
    Route(
        "GET",
        f"{SESSION}/inputs",
        list_inputs,
        "The terminal input history of the session (.cmd_history)",
        replies={200: Inputs},
        errors=(400, 404),
    ),
    Route(
        "POST",
        f"{SESSION}/inputs",
        add_input,
        "Remember a typed line",
        body=AddInputRequest,
        replies={200: Inputs},
        errors=(400, 404, 413),
    ),
    # -- schedules
    Route(
        "GET",
        f"{SESSION}/schedules",
        list_schedules,
        "The session's scheduled prompts",
        replies={200: ScheduleList},
        errors=(400, 404),
    ),
    Route(
        "POST",
        f"{SESSION}/schedules",
        create_schedule,
        "Schedule a prompt to run in the session at each due time",
        body=ScheduleRequest,
        caller=True,
        access=Access.shared_admin,
        checked_by="the schedules: admins only in shared chats",
        replies={201: ScheduleView},
        errors=(400, 404, 413),
    ),
    Route(
        "DELETE",
        f"{SESSION}/schedules/{{schedule_id}}",
        delete_schedule,
        "Remove a schedule of the session",
        caller=True,
        access=Access.shared_admin,
        checked_by="the schedules: admins only in shared chats",
        replies={200: Unscheduled},
        errors=(400, 404),
    ),
    # -- sending
    Route(
        "POST",
        "/v1/send",
        send,
        "Send a message (or a gateway command) to a session",
        body=SendRequest,
        caller=True,
        replies={
            200: (SendFinished, CommandResult, TASK_STREAM),
            202: (SendPending, SendAccepted),
        },
        errors=(400, 413, 429, 503),
        checked_by="each command's own rule (/reset: shared_admin)",
    ),
    Route(
        "GET",
        "/v1/commands",
        list_commands,
        "The gateway commands the caller's front-end offers",
        caller=True,
        replies={200: CommandList},
        errors=(400,),
    ),
    # -- tasks and prompts
    Route(
        "GET",
        f"{SESSION}/pending",
        list_pending,
        "Open confirmations and questions of the session that the caller may answer",
        caller=True,
        replies={200: PendingList},
        errors=(400, 404),
    ),
    Route(
        "GET",
        "/v1/pending",
        list_all_pending,
        "Open prompts in every session that the sender may answer",
        caller=True,
        replies={200: PendingList},
        errors=(400,),
    ),
    Route(
        "POST",
        f"{SESSION}/pending/{TASK}",
        answer_prompt,
        "Answer a task's confirmation or question",
        body=AnswerRequest,
        caller=True,
        replies={200: (Approved, Answered)},
        errors=(400, 404, 409, 413),
        access=Access.requester,
        checked_by="the router, against the task's origin",
    ),
    Route(
        "GET",
        f"{SESSION}/task/{TASK}",
        get_task,
        "A task's state and events; optionally long-polls",
        query=TaskQuery,
        replies={200: TaskView},
        errors=(400, 404, 503),
    ),
    Route(
        "POST",
        f"{SESSION}/cancel/{TASK}",
        cancel_task,
        "Cancel a queued or running task",
        caller=True,
        replies={200: Canceled},
        errors=(400, 404),
        access=Access.requester,
        checked_by="the router, against the task's origin",
    ),
    # -- the archive
    Route(
        "GET",
        f"{SESSION}/history",
        get_history,
        "The latest archived messages, oldest first",
        query=HistoryQuery,
        replies={200: Messages},
        errors=(400, 404),
    ),
    Route(
        "GET",
        f"{SESSION}/log",
        stream_log,
        "The session's action.log tail, then its live events (SSE)",
        query=LogQuery,
        replies={200: LOG_STREAM},
        errors=(400, 404, 503),
        # A HEAD would hold an endless stream open with nothing to send.
        allow_head=False,
    ),
    Route(
        "GET",
        "/v1/search",
        search,
        "Messages containing every term of q, newest first; or, with mode=semantic, a "
        "session's messages closest in meaning to q",
        query=SearchQuery,
        replies={200: SearchHits},
        errors=(400, 404, 503),
    ),
    Route(
        "GET",
        "/v1/usage",
        usage,
        "Token spend per model",
        query=UsageQuery,
        replies={200: UsageList},
        errors=(400,),
    ),
    # -- operations
    Route(
        "GET",
        "/healthz",
        healthz,
        "Readiness: the archive, the KV store and the leases answer; never needs a token",
        replies={200: Health, 503: HealthUnavailable},
        public=True,
    ),
    Route(
        "GET",
        "/metrics",
        metrics,
        "Prometheus text exposition (version 0.0.4)",
        replies={200: METRICS_TEXT},
    ),
    Route(
        "GET",
        "/openapi.json",
        openapi,
        "This document",
        replies={200: OpenApiDocument},
    ),
)
