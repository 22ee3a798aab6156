"""Sending a message: `POST /v1/send`, answered when the task ends or asks something, at once
for a gateway command, or as the task's event stream."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets

from aiohttp import web

from adapters.attachments import Download, describe, stage_downloads
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
from gateway.engine import Submission
from gateway.events import Event, Inbound, event_to_json
from gateway.ids import Prefix, new_session_id, validate_session_id
from gateway.logs import get_logger

log = get_logger(__name__)


async def send(call: Call) -> Reply | web.StreamResponse:
    """Without session_id a new temp-* session (chat-* with persist). A gateway command answers
    at once. Otherwise waits up to `wait` seconds; with stream the task's events come as
    text/event-stream until done, error or canceled, and a client that leaves does not cancel
    the task."""
    body = await call.body(SendRequest)
    if body.session_id is not None:
        session_id = validate_session_id(body.session_id)
    else:
        session_id = new_session_id(Prefix.chat if body.persist else Prefix.temp)
    ctx = call.ctx
    ctx.runtime.crash.reach("received")
    if body.attachments:
        submission = await submit_with_files(call, session_id, body)
    else:
        submission = await ctx.router.submit(Inbound(call.origin(), session_id, body.content))
    if submission.command is not None:
        command = submission.command
        return CommandResult(
            session_id=submission.session_id, command=command.name, ok=command.ok, text=command.text
        )
    if body.stream:
        return await stream_task(call, submission)
    state = await ctx.until_closing(
        ctx.router.wait(submission.task_hash, body.wait, until_prompt=True),
        ctx.farewell(submission.session_id, submission.task_hash),
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


async def submit_with_files(call: Call, session_id: str, body: SendRequest) -> Submission:
    """Submit a message with its files, saved in the session's workspace once the message
    passed the intake's checks, as the chat adapters do: described in its text (and voice
    notes transcribed), images shown to a vision model."""
    ctx = call.ctx
    router = ctx.router
    with router.take_turn(session_id) as turn:
        router.check_text(body.content)  # before a file is written for it
        downloads = [_download(upload) for upload in body.attachments]
        staged = await stage_downloads(ctx.store, session_id, downloads, MAX_UPLOAD_BYTES, ())
        try:
            text = f"{body.content}\n{describe(staged.attachments)}"
            text = await with_transcripts(ctx.settings, text, staged)
            router.check_text(text)
            await staged.keep()
            inbound = Inbound(call.origin(), session_id, text, staged.attachments)
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


async def stream_task(call: Call, submission: Submission) -> web.StreamResponse:
    """The task's events as SSE until it ends; a client leaving does not cancel the task."""
    ctx = call.ctx
    response, stream = ctx.event_stream(
        call.request,
        ctx.farewell(submission.session_id, submission.task_hash),
        {"X-Agenvoy-Session": submission.session_id, "X-Agenvoy-Task": submission.task_hash},
    )
    queue: asyncio.Queue[Event | None] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in ctx.router.stream(submission.task_hash):
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
            session=submission.session_id,
            task=submission.task_hash,
        )
    finally:
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping
    return response
