"""What the gateway offers as MCP tools: its sessions, their history, sending a message and
waiting for the reply, and the prompts the caller may answer.

Each tool does what its HTTP route does, as the caller their credential names, under the same
rule (README, Security): a tool reads its arguments with the request models' strictness and
answers with the API's reply models. Nothing here imports the MCP SDK; `server.py` serves
these over the protocol.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from adapters.http.archive import history_page
from adapters.http.context import Context
from adapters.http.errors import ApiError
from adapters.http.models import (
    HISTORY_DEFAULT,
    HISTORY_MAX,
    PENDING_DEFAULT,
    PENDING_MAX,
    SEARCH_DEFAULT,
    SESSION_CURSOR_PATTERN,
    SESSIONS_DEFAULT,
    SESSIONS_MAX,
    NonBlank,
    RequestBody,
    SessionId,
    WaitSeconds,
)
from adapters.http.paging import IdCursor, PromptCursor, limit_field, read_cursor
from adapters.http.prompts import may_answer, pending_page, task_view
from adapters.http.replies import (
    Answered,
    Approved,
    CommandResult,
    Message,
    Messages,
    PendingList,
    Prompt,
    Reply,
    SearchResults,
    SessionList,
    TaskView,
)
from adapters.http.search import search_page
from adapters.http.sessions import session_list
from gateway.engine import Submission, TaskStatus
from gateway.events import Inbound, Origin
from gateway.ids import Prefix, new_session_id, validate_hash, validate_session_id
from gateway.ownership import Need
from gateway.store.search import MAX_PAGE

# Long enough for most replies; an MCP client's own request timeout may be shorter, and the
# task goes on when it gives up: `get_task` finds it again.
SEND_WAIT_DEFAULT: Final = 120.0


class Arguments(RequestBody):
    # Tool arguments arrive as JSON from a model or an editor: strict types, as a body.
    model_config = ConfigDict(title="arguments")


class ListSessionsArgs(Arguments):
    prefix: Prefix | None = Field(None, description="Only sessions with this prefix.")
    limit: int = limit_field(SESSIONS_DEFAULT, SESSIONS_MAX)
    cursor: str | None = Field(
        None,
        max_length=200,
        pattern=SESSION_CURSOR_PATTERN,
        description="Where the page starts: the next_cursor of the page before.",
    )


class ReadHistoryArgs(Arguments):
    session_id: SessionId
    limit: int = limit_field(HISTORY_DEFAULT, HISTORY_MAX)
    cursor: IdCursor | None = None


class SearchHistoryArgs(Arguments):
    query: NonBlank = Field(description="Search terms (full text).")
    session_id: SessionId | None = Field(None, description="Only this session.")
    limit: int = limit_field(SEARCH_DEFAULT, MAX_PAGE)
    cursor: IdCursor | None = None


class SendMessageArgs(Arguments):
    content: NonBlank = Field(description="The message, or a gateway command such as /help.")
    session_id: SessionId | None = Field(
        None, description="Without one: a new temp-* session (chat-* with persist)."
    )
    persist: bool = False
    wait: WaitSeconds = SEND_WAIT_DEFAULT


class GetTaskArgs(Arguments):
    session_id: SessionId
    task_hash: str
    wait: WaitSeconds = 0.0


class ListPendingArgs(Arguments):
    session_id: SessionId | None = Field(None, description="Only this session's prompts.")
    limit: int = limit_field(PENDING_DEFAULT, PENDING_MAX)
    cursor: PromptCursor | None = None


class AnswerPromptArgs(Arguments):
    session_id: SessionId
    task_hash: str
    approve: bool | None = Field(None, description="The answer to a confirmation.")
    answer: str | None = Field(None, description="The answer to a question.")


class TaskOutcome(Reply):
    """Where a task stands: its reply when it ended, the prompt it waits on, or neither yet
    (ask `get_task` again)."""

    session_id: SessionId
    task_hash: str
    status: TaskStatus
    text: str
    error: str
    pending: Prompt | None


Work = Callable[[Context, Origin, Any], Awaitable[BaseModel]]


@dataclass(frozen=True, slots=True)
class McpTool:
    name: str
    description: str
    arguments: type[Arguments]
    run: Work
    read_only: bool


async def _list_sessions(ctx: Context, who: Origin, args: ListSessionsArgs) -> SessionList:
    return await session_list(ctx, who, args.prefix, args.cursor, args.limit)


async def _read_history(ctx: Context, who: Origin, args: ReadHistoryArgs) -> Messages:
    session_id = validate_session_id(args.session_id)
    before = read_cursor(args.cursor, int)
    await ctx.access.require(who, session_id, Need.read)
    return await history_page(ctx, session_id, args.limit, before)


async def _search_history(ctx: Context, who: Origin, args: SearchHistoryArgs) -> SearchResults:
    session_id = validate_session_id(args.session_id) if args.session_id else None
    found, next_cursor = await search_page(
        ctx, who, args.query, session_id, args.limit, args.cursor
    )
    return SearchResults(results=[Message.of(m) for m in found], next_cursor=next_cursor)


async def _send_message(
    ctx: Context, who: Origin, args: SendMessageArgs
) -> TaskOutcome | CommandResult:
    if args.session_id is not None:
        session_id = validate_session_id(args.session_id)

        async def submit(claim: bool) -> Submission:
            return await ctx.router.submit(Inbound(who, session_id, args.content, claim=claim))

        need = ctx.runtime.commands.need_of(args.content)
        submission = await ctx.access.sending(who, session_id, submit, need)
    else:
        session_id = new_session_id(Prefix.chat if args.persist else Prefix.temp)
        submission = await ctx.router.submit(Inbound(who, session_id, args.content))
    if submission.command is not None:
        command = submission.command
        return CommandResult(
            session_id=submission.session_id, command=command.name, ok=command.ok, text=command.text
        )
    try:
        state = await ctx.until_closing(
            ctx.router.wait(submission.task_hash, args.wait, until_prompt=True),
            ctx.farewell(submission.session_id, submission.task_hash),
        )
    except ApiError as exc:
        if exc.code != "restarting":
            raise
        again = (
            f"get_task with session_id {submission.session_id} and task_hash {submission.task_hash}"
        )
        message = f"the gateway is restarting; the task goes on: call {again} once it is back"
        raise ApiError(503, "restarting", message) from None
    return _outcome(TaskView.of(state))


async def _get_task(ctx: Context, who: Origin, args: GetTaskArgs) -> TaskOutcome:
    session_id = validate_session_id(args.session_id)
    await ctx.access.require(who, session_id, Need.read)
    return _outcome(await task_view(ctx, session_id, validate_hash(args.task_hash), args.wait))


def _outcome(view: TaskView) -> TaskOutcome:
    return TaskOutcome(**view.model_dump(include=set(TaskOutcome.model_fields)))


async def _list_pending(ctx: Context, who: Origin, args: ListPendingArgs) -> PendingList:
    if args.session_id is None:
        prompts = await ctx.router.open_prompts()
    else:
        session_id = validate_session_id(args.session_id)
        await ctx.access.require(who, session_id, Need.read)
        prompts = await ctx.router.open_prompts(session_id)
    return pending_page(may_answer(ctx, who, prompts), args.limit, args.cursor)


async def _answer_prompt(ctx: Context, who: Origin, args: AnswerPromptArgs) -> Approved | Answered:
    if (args.approve is None) == (args.answer is None):
        raise ValueError("give either 'approve' (a confirmation) or 'answer' (a question)")
    session_id = validate_session_id(args.session_id)
    await ctx.access.require(who, session_id, Need.write)
    result = await ctx.router.answer(
        session_id,
        validate_hash(args.task_hash),
        who,
        approve=args.approve,
        text=args.answer,
    )
    if args.approve is not None:
        return Approved(approved=result.approved, by=result.by)
    return Answered(answer=result.text, by=result.by)


TOOLS: Final[tuple[McpTool, ...]] = (
    McpTool(
        "list_sessions",
        "The gateway's sessions (Discord channels, Telegram chats, terminal and HTTP chats): "
        "id, name, last activity, message count and whether a task runs.",
        ListSessionsArgs,
        _list_sessions,
        read_only=True,
    ),
    McpTool(
        "read_history",
        "A session's latest messages, oldest first, with sender and time.",
        ReadHistoryArgs,
        _read_history,
        read_only=True,
    ),
    McpTool(
        "search_history",
        "Full-text search over the messages of every session, or of one.",
        SearchHistoryArgs,
        _search_history,
        read_only=True,
    ),
    McpTool(
        "send_message",
        "Send a message to a session as yourself and wait for the agent's reply. If the agent "
        "asks something first, the answer holds the prompt: answer it with answer_prompt, then "
        "follow the task with get_task.",
        SendMessageArgs,
        _send_message,
        read_only=False,
    ),
    McpTool(
        "get_task",
        "Where a task stands; with wait, waits up to that many seconds for it to end or ask.",
        GetTaskArgs,
        _get_task,
        read_only=True,
    ),
    McpTool(
        "list_pending",
        "Open confirmations and questions that you may answer (the requester's, or any as an "
        "admin).",
        ListPendingArgs,
        _list_pending,
        read_only=True,
    ),
    McpTool(
        "answer_prompt",
        "Answer a task's confirmation (approve true or false) or question (answer). Only the "
        "person who started the task, or an admin, may.",
        AnswerPromptArgs,
        _answer_prompt,
        read_only=False,
    ),
)
TOOLS_BY_NAME: Final = {tool.name: tool for tool in TOOLS}
