"""Sending a message: `POST /v1/send`, answered when the task ends or asks something, at once
for a gateway command, or as the task's event stream. With an `Idempotency-Key`, sending it
again answers with the task the first sending started (adapters/http/idempotency.py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
from dataclasses import replace

from aiohttp import web

from adapters.attachments import Download, describe, stage_downloads
from adapters.http.idempotency import kept, outcome_unknown, request_key
from adapters.http.models import MAX_UPLOAD_BYTES, SendRequest, Upload
from adapters.http.replies import (
    CommandResult,
    Prompt,
    Reply,
    SendAccepted,
    SendFinished,
    SendPending,
)
from adapters.http.route import Call
from adapters.http.sse import StreamClosed
from adapters.voice import with_transcripts
from gateway.commands.registry import parse_command
from gateway.engine import MaybeStored, Submission, TaskNotFound
from gateway.events import Event, Inbound, event_to_json
from gateway.ids import Prefix, new_session_id, validate_session_id
from gateway.logs import get_logger
from gateway.store.request_keys import KeptRequest, RequestKey, RequestKeyTaken

log = get_logger(__name__)


async def send(call: Call) -> Reply | web.StreamResponse:
    """Without session_id a new temp-* session (chat-* with persist). A gateway command answers
    at once. Otherwise waits up to `wait` seconds; with stream the task's events come as
    text/event-stream until done, error or canceled, and a client that leaves does not cancel
    the task. With an Idempotency-Key sent before (within 24 hours, by the same caller), the
    answer is that first request's task as it stands now: nothing is stored or run again."""
    body = await call.body(SendRequest)
    request = request_key(call, _asked(body))
    first = await kept(call, request)
    if first is not None:
        return await _again(call, body, first)
    ctx = call.ctx

    async def submit(claim: bool) -> Submission:
        ctx.runtime.crash.reach("received")
        if body.attachments:
            return await submit_with_files(call, session_id, body, request, claim=claim)
        inbound = replace(_inbound(call, session_id, body.content, request), claim=claim)
        return await ctx.router.submit(inbound)

    try:
        if body.session_id is not None:
            session_id = validate_session_id(body.session_id)
            # A new id the client chose may be chosen by another at the same moment: one of
            # them makes the session, the other is refused as for anyone else's session.
            need = ctx.runtime.commands.need_of(body.content)
            caller = call.ctx.caller(call.request)
            submission = await ctx.access.sending(caller, session_id, submit, need)
        else:
            session_id = new_session_id(Prefix.chat if body.persist else Prefix.temp)
            submission = await submit(False)
    except MaybeStored as unknown:
        raise outcome_unknown(request, unknown.session_id, unknown.task_hash) from None
    except RequestKeyTaken:  # the same key, sent twice at once: the other one stored first
        submission = Submission(session_id, duplicate=True)
    if submission.duplicate and request is not None:
        first = await kept(call, request)
        if first is None:  # a gateway command the first request ran
            return _command_again(submission.session_id, body.content)
        return await _again(call, body, first)
    if submission.command is not None:
        command = submission.command
        return CommandResult(
            session_id=submission.session_id, command=command.name, ok=command.ok, text=command.text
        )
    return await _answer(call, body, submission.session_id, submission.task_hash)


def _asked(body: SendRequest) -> dict[str, object]:
    """What makes two sendings the same request: not how the answer is awaited."""
    asked = body.model_dump(include={"content", "attachments", "session_id", "persist"})
    return {"op": "send", **asked}


def _inbound(call: Call, session_id: str, text: str, request: RequestKey | None) -> Inbound:
    if request is None:
        return Inbound(call.origin(), session_id, text)
    return Inbound(
        call.origin(),
        session_id,
        text,
        source_key=request.key,
        request_fingerprint=request.fingerprint,
    )


async def _answer(
    call: Call, body: SendRequest, session_id: str, task_hash: str
) -> Reply | web.StreamResponse:
    ctx = call.ctx
    if body.stream:
        return await stream_task(call, session_id, task_hash)
    state = await ctx.until_closing(
        ctx.router.wait(task_hash, body.wait, until_prompt=True),
        ctx.farewell(session_id, task_hash),
    )
    sid, task_hash, status = state.session_id, state.task_hash, state.status
    if state.finished:
        return SendFinished(
            session_id=sid,
            task_hash=task_hash,
            status=status,
            text=state.reply,
            error=state.error,
            events=list(state.events),
            collected_into=state.collected_into,
        )
    if state.prompt is not None:
        pending = Prompt.of(state.prompt)
        return SendPending(session_id=sid, task_hash=task_hash, status=status, pending=pending)
    return SendAccepted(session_id=sid, task_hash=task_hash, status=status)


async def _again(call: Call, body: SendRequest, first: KeptRequest) -> Reply | web.StreamResponse:
    """The task the key's first request started, awaited as that request would have been."""
    ctx = call.ctx
    sid, task_hash = first.session_id, first.task_hash
    if not _here(call, task_hash):
        run = await ctx.store.finished_run(sid, task_hash)
        if run is not None:  # finished before a restart: the archive knows how
            reply = run["reply"]
            error = "" if reply else "the task ended without a reply"
            status = "done" if reply else "error"
            return SendFinished(
                session_id=sid,
                task_hash=task_hash,
                status=status,
                text=reply,
                error=error,
                events=[],
            )
        # Stored though its sender never heard so (a COMMIT cut off): its journal is taken up
        # now, unless another instance runs its session, rather than at recovery's next round.
        await ctx.router.recover()
        try:
            await ctx.router.find(task_hash)
        except TaskNotFound:
            return SendAccepted(session_id=sid, task_hash=task_hash, status="queued")
    return await _answer(call, body, sid, task_hash)


def _here(call: Call, task_hash: str) -> bool:
    """Whether this instance has the task in its table."""
    try:
        call.ctx.router.task(task_hash)
    except TaskNotFound:
        return False
    return True


def _command_again(session_id: str, content: str) -> CommandResult:
    parsed = parse_command(content)
    name = parsed[0] if parsed is not None else ""
    text = f"/{name} ran when this Idempotency-Key was first sent; it is not run again"
    return CommandResult(session_id=session_id, command=name, ok=True, text=text)


async def submit_with_files(
    call: Call,
    session_id: str,
    body: SendRequest,
    request: RequestKey | None,
    *,
    claim: bool = False,
) -> Submission:
    """Submit a message with its files, saved in the session's workspace once the message
    passed the intake's checks, as the chat adapters do: described in its text (and voice
    notes transcribed), images shown to a vision model."""
    ctx = call.ctx
    router = ctx.router
    with router.take_turn(session_id) as turn:
        router.check_text(body.content)  # before a file is written for it
        downloads = [_download(upload) for upload in body.attachments]
        # The files may make the session: it is the sender's, as the message would make it.
        owner = ctx.access.owner_for(session_id, call.origin())
        staged = await stage_downloads(
            ctx.store, session_id, downloads, MAX_UPLOAD_BYTES, (), owner=owner, claim=claim
        )
        try:
            text = f"{body.content}\n{describe(staged.attachments)}"
            text = await with_transcripts(ctx.settings, text, staged)
            router.check_text(text)
            await staged.keep()
            inbound = replace(
                _inbound(call, session_id, text, request),
                attachments=staged.attachments,
                claim=claim,
            )
            return await router.submit(inbound, turn=turn)
        except Exception:
            await staged.drop()
            raise


def _download(upload: Upload) -> Download:
    data = base64.b64decode(upload.data)

    async def fetch() -> bytes:
        return data

    # A prefix of its own keeps a file from replacing an earlier one of the same name.
    return Download(f"{secrets.token_hex(4)}_{upload.name}", upload.mime, len(data), fetch)


async def stream_task(call: Call, session_id: str, task_hash: str) -> web.StreamResponse:
    """The task's events as SSE until it ends; a client leaving does not cancel the task."""
    ctx = call.ctx
    response, stream = ctx.event_stream(
        call.request,
        ctx.farewell(session_id, task_hash),
        {"X-Agenvoy-Session": session_id, "X-Agenvoy-Task": task_hash},
    )
    queue: asyncio.Queue[Event | None] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in ctx.router.stream(task_hash):
                queue.put_nowait(event)
        finally:
            queue.put_nowait(None)

    pumping = asyncio.create_task(pump())
    try:
        await stream.start()
        while (event := await stream.receive(queue.get)) is not None:
            await stream.frame(event.kind, event_to_json(event))
        await stream.end()
    except StreamClosed:
        log.info(
            "task stream ended before the task; the task goes on",
            session=session_id,
            task=task_hash,
        )
    finally:
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping
    return response
