"""Tasks and their prompts: open confirmations and questions, answers, a task's state, and
canceling. Who may answer or cancel is the core's rule (`gateway.auth`)."""

from __future__ import annotations

from adapters.http.context import Context
from adapters.http.errors import ApiError
from adapters.http.models import AnswerRequest, PendingQuery, TaskQuery
from adapters.http.paging import page_of, read_cursor
from adapters.http.replies import Answered, Approved, Canceled, PendingList, TaskView
from adapters.http.route import Call
from gateway.engine import Prompt
from gateway.events import Origin
from gateway.ids import HASH_RE


async def list_pending(call: Call) -> PendingList:
    """Open prompts of the session that the caller may answer (an admin: all of them)."""
    query = call.query(PendingQuery)
    await call.ctx.require_session(call.session_id)
    prompts = await call.ctx.router.open_prompts(call.session_id)
    return pending_page(may_answer(call.ctx, call.origin(), prompts), query.limit, query.cursor)


async def list_all_pending(call: Call) -> PendingList:
    """Open prompts in every session that the caller may answer."""
    query = call.query(PendingQuery)
    prompts = await call.ctx.router.open_prompts()
    return pending_page(may_answer(call.ctx, call.origin(), prompts), query.limit, query.cursor)


def may_answer(ctx: Context, origin: Origin, prompts: list[Prompt]) -> list[Prompt]:
    """The prompts `origin` may answer."""
    authority = ctx.runtime.authority
    return [p for p in prompts if authority.may_act_for(origin, p.origin)]


def answerable(ctx: Context, origin: Origin, prompts: list[Prompt]) -> PendingList:
    """The prompts `origin` may answer, all of them (MCP and the console's session page)."""
    return PendingList.of(may_answer(ctx, origin, prompts))


def _key(prompt: Prompt) -> tuple[int, str]:
    return prompt.expires_at, prompt.task_hash


def pending_page(prompts: list[Prompt], limit: int, cursor: str | None) -> PendingList:
    """A page of `prompts`, soonest to expire first (a task has one open prompt at a time, so
    expiry and task name one). They are the caller's already: a page is never short of them."""
    after = read_cursor(cursor, int, str)
    ordered = sorted(prompts, key=_key)
    if after is not None:
        ordered = [p for p in ordered if _key(p) > (int(after[0]), str(after[1]))]
    shown, next_cursor = page_of(ordered[: limit + 1], limit, _key)
    return PendingList.of(shown, next_cursor)


async def answer_prompt(call: Call) -> Approved | Answered:
    """Only the sender who started the task, or an admin, may answer."""
    body = await call.body(AnswerRequest)
    result = await call.ctx.router.answer(
        call.session_id, call.task_hash, call.origin(), approve=body.approve, text=body.answer
    )
    if body.approve is not None:
        return Approved(approved=result.approved, by=result.by)
    return Answered(answer=result.text, by=result.by)


async def get_task(call: Call) -> TaskView:
    """With `wait`, long-polls until the task ends or starts waiting on a prompt. A task already
    waiting on one is waited on until it ends, so a client polling after it saw the prompt
    does not spin."""
    wait = call.query(TaskQuery).wait
    return await task_view(call.ctx, call.session_id, call.task_hash, wait)


async def task_view(ctx: Context, session_id: str, task_hash: str, wait: float | None) -> TaskView:
    """The task as `GET /v1/session/{sid}/task/{task_hash}` answers it."""
    try:
        state = await ctx.task_of(session_id, task_hash)
    except ApiError as missing:
        # Not in memory here nor running on another instance (finished before a restart, or
        # long ago): the archive still knows how it ended.
        if missing.status != 404 or HASH_RE.fullmatch(task_hash) is None:
            raise
        archived = await _archived(ctx, session_id, task_hash)
        if archived is None:
            raise
        return archived
    if wait:
        until_prompt = state.prompt is None
        state = await ctx.until_closing(
            ctx.router.wait(state.task_hash, wait, until_prompt=until_prompt),
            ctx.farewell(state.session_id, state.task_hash),
        )
    return TaskView.of(state)


async def _archived(ctx: Context, session_id: str, task_hash: str) -> TaskView | None:
    run = await ctx.store.finished_run(session_id, task_hash)
    if run is None:
        return None
    reply = run["reply"]
    return TaskView(
        session_id=session_id,
        task_hash=task_hash,
        status="done" if reply else "error",
        text=reply,
        error="" if reply else "the task ended without a reply",
        pending=None,
        events=[],
    )


async def cancel_task(call: Call) -> Canceled:
    """Only the sender who started the task, or an admin, may cancel."""
    state = await call.ctx.task_of(call.session_id, call.task_hash)
    stood = await call.ctx.router.cancel_for(call.origin(), state.session_id, state.task_hash)
    return Canceled(canceled=stood is not None, was=stood)
