"""The `agenvoy` commands that are clients of a running gateway: `chat` opens the window,
`send`, `pending`, `approve`, `deny` and `answer` talk to its HTTP API, and `mcp` carries an
MCP client's stdio to it. The root command registers them.
What the gateway sends back is printed through `printable`: it can carry anyone's text.

They open no store and start no agent, so what they import comes in only when one runs.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from adapters.cli_discord import discord_app
from gateway.cli_support import checked_id, fail, load_settings, printable

if TYPE_CHECKING:
    from adapters.http_client import GatewayClient, Reply

T = TypeVar("T")

# How long `send` first waits for an answer before it says why the message is still waiting.
FIRST_LOOK_SECONDS = 1.0


def register(app: typer.Typer) -> None:
    for command in (chat, send, pending, approve, deny, answer, mcp, link):
        app.command()(command)
    # The Discord bot's own command (its invite link) lives with it, as light to import.
    app.add_typer(discord_app, name="discord")


def _client_call(work: Callable[[GatewayClient], Awaitable[T]]) -> T:
    from adapters.http_client import GatewayClient, GatewayError, GatewayUnavailable
    from adapters.terminal.launch import client_token
    from gateway.client_settings import InvalidClientSettings, read_client_settings

    try:
        settings = read_client_settings()
    except InvalidClientSettings as exc:
        fail(f"invalid settings:\n{exc}", 2)
    token = client_token(settings)

    async def main() -> T:
        async with GatewayClient(settings.gateway_url, token) as client:
            return await work(client)

    try:
        return asyncio.run(main())
    except (GatewayUnavailable, GatewayError) as exc:
        fail(str(exc), 1)


def chat(
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", metavar="SID", help="The session to open."),
    ] = None,
    start: Annotated[
        bool, typer.Option("--start", help="Start the gateway in the background if it is down.")
    ] = False,
) -> None:
    """Open the full-screen chat window on a session of the running gateway.

    Without --session it opens the session used last, or a new cli-* one.
    """
    from adapters.terminal.app import ChatApp, ChatConfig
    from adapters.terminal.launch import GatewayNotRunning, client_token, ensure_gateway

    if session is not None:
        checked_id(session)
    # The whole settings, checked: a gateway started from here reads them too.
    settings = load_settings().client()
    try:
        started = asyncio.run(ensure_gateway(settings, start=start))
    except (GatewayNotRunning, TimeoutError) as exc:
        fail(str(exc) or "the gateway did not come up in time; see its log", 1)
    if started is not None:
        typer.echo(
            f"started the gateway in the background (pid {started.pid}, log: {started.log_file})"
        )
    config = ChatConfig(
        base_url=settings.gateway_url,
        # Read once the gateway is up: a gateway started just now wrote the credential.
        token=client_token(settings),
        session_id=session,
        state_file=settings.home / "terminal.json",
        windows_dir=settings.home / "windows",
    )
    window = ChatApp(config)
    window.run()
    if window.return_code:
        raise typer.Exit(window.return_code)


def _ask_in_terminal(prompt: dict[str, Any]) -> dict[str, Any] | None:
    if not sys.stdin.isatty():
        return None
    if prompt.get("kind") == "confirm":
        question = f"Allow {_confirmation(prompt)}?"
        return {"approve": typer.confirm(question, default=False)}
    return {"answer": typer.prompt(printable(str(prompt.get("question") or "Answer")))}


def _confirmation(prompt: dict[str, Any]) -> str:
    # json.dumps escapes every control character in the arguments (ensure_ascii).
    return f"{printable(str(prompt.get('tool')))} {json.dumps(prompt.get('args', {}))}"


def send(
    text: str,
    session: Annotated[str | None, typer.Option("--session", "-s", metavar="SID")] = None,
    persist: Annotated[bool, typer.Option(help="Keep the session (chat-*), not temp-*.")] = False,
    wait: Annotated[float, typer.Option(min=1, max=300, help="Seconds to wait.")] = 120,
) -> None:
    """Send a message to the running gateway and print the reply."""
    if session is not None:
        checked_id(session)

    # One key for every sending of this message: a retry is answered with the first's task.
    key = str(uuid.uuid4())

    async def work(client: GatewayClient) -> int:
        from adapters.terminal.outcome import Exit, Notices, finish, say, waiting_line

        notices = Notices()
        # A first short look: a message that is not answered at once is told why it waits
        # (its place in the queue, a prompt ahead of it) instead of sitting silent for --wait.
        look = min(wait, FIRST_LOOK_SECONDS)

        def sent() -> Awaitable[Reply]:
            return client.send(
                text, session_id=session, persist=persist, wait=look, idempotency_key=key
            )

        reply = await _across_restarts(client, sent, wait, resend=True)
        body = reply.body
        sid = str(body.get("session_id", ""))
        if session is None and persist:
            say(f"session {printable(sid)} (go on with --session {printable(sid)})")
        elif session is None and sid.startswith("temp-"):
            say(
                f"session {printable(sid)}: a temp- session, reaped after 30 idle minutes "
                "(AGENVOY_TEMP_IDLE_SECONDS); --persist keeps one, --session SID goes on with one"
            )
        if reply.status == 202 and body.get("task_hash") and not body.get("pending"):
            if body.get("status") == "queued":
                await notices.queued(client, body)
            rest = partial(client.task, body["session_id"], body["task_hash"], wait - look)
            reply = await _across_restarts(client, rest, wait)
            body = reply.body
        while reply.status == 202 and body.get("pending"):
            prompt = body["pending"]
            answer = _ask_in_terminal(prompt)
            if answer is None:
                typer.echo(waiting_line(body))
                return Exit.STILL_RUNNING
            await client.answer(
                body["session_id"],
                body["task_hash"],
                approve=answer.get("approve"),
                text=answer.get("answer"),
            )
            follow = partial(client.task, body["session_id"], body["task_hash"], wait)
            reply = await _across_restarts(client, follow, wait)
            body = reply.body
        if "command" in body:
            typer.echo(printable(str(body.get("text", "")), body=""))
            return 0 if body.get("ok", True) else 1
        return await finish(client, body, wait, notices)

    code = _client_call(work)
    if code:
        raise typer.Exit(code)


async def _across_restarts(
    client: GatewayClient,
    call: Callable[[], Awaitable[Reply]],
    within: float,
    *,
    resend: bool = False,
) -> Reply:
    """`call()`; when the gateway shuts down before its task ends (503 `restarting`, naming the
    task), the task is asked for again once the gateway is back, for up to `within` seconds.
    The task was stored before the gateway acknowledged it: a restart resumes it. With
    `resend` (a request carrying an Idempotency-Key), one that got no answer, or one that may
    not have been stored, is sent again as it is."""
    from adapters.http_client import AnswerLost, GatewayError, GatewayUnavailable

    try:
        return await call()
    except GatewayError as exc:
        cut = exc.restarting_task
        if cut is None:
            if not (resend and exc.may_send_again):
                raise
            return await _sent_again(client, call, within, exc.retry_after)
        pause = exc.retry_after
    except AnswerLost:
        if not resend:
            raise
        return await _sent_again(client, call, within, 0.5)

    def down(exc: BaseException) -> bool:
        if isinstance(exc, GatewayError):  # shutting down, or back but not ready yet
            return exc.restarting_task is not None or (exc.status, exc.code) == (503, "starting")
        return isinstance(exc, GatewayUnavailable)

    session_id, task_hash = cut
    typer.secho("the gateway is restarting; waiting for it to answer", err=True)
    return await _retried(down, lambda: client.task(session_id, task_hash, within), within, pause)


async def _sent_again(
    client: GatewayClient, call: Callable[[], Awaitable[Reply]], within: float, pause: float
) -> Reply:
    """`call()`, whose key makes a repeat answer with what the first sending stored, until the
    gateway answers it, for up to `within` seconds."""
    from adapters.http_client import GatewayError, GatewayUnavailable

    def unanswered(exc: BaseException) -> bool:
        if isinstance(exc, GatewayError):
            return exc.may_send_again or (exc.status, exc.code) == (503, "starting")
        return isinstance(exc, GatewayUnavailable)

    typer.secho("no answer from the gateway yet; sending the message again", err=True)
    return await _retried(unanswered, lambda: _across_restarts(client, call, within), within, pause)


async def _retried(
    again: Callable[[BaseException], bool],
    work: Callable[[], Awaitable[Reply]],
    within: float,
    pause: float,
) -> Reply:
    """`work()` after `pause`, and again with a growing wait while it fails in a way `again`
    accepts, for up to `within` seconds."""
    # Only a command that got this far pays for the retry machinery's import.
    from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

    await asyncio.sleep(pause)
    retrying = AsyncRetrying(
        retry=retry_if_exception(again),
        stop=stop_after_delay(within),
        wait=wait_exponential(multiplier=0.2, max=2),
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            return await work()
    raise AssertionError("unreachable")  # pragma: no cover  (reraise=True ends the loop)


def pending(
    session: Annotated[str | None, typer.Option("--session", "-s", metavar="SID")] = None,
) -> None:
    """Confirmations and questions waiting for an answer."""
    if session is not None:
        checked_id(session)
    prompts = _client_call(lambda client: client.pending(session))
    if not prompts:
        typer.echo("nothing is waiting")
        return
    for p in prompts:
        what = (
            f"confirm {_confirmation(p)}"
            if p.get("kind") == "confirm"
            else f"question: {printable(str(p.get('question')))}"
        )
        typer.echo(f"{printable(str(p['session_id']))}  {printable(str(p['task_hash']))}  {what}")


def _answer(session_id: str, task_hash: str, approve: bool) -> None:
    reply = _client_call(lambda client: client.answer(session_id, task_hash, approve=approve))
    by = printable(str(reply.body.get("by", "?")))
    typer.echo(f"{'approved' if approve else 'denied'} (by {by})")


def approve(
    session_id: Annotated[str, typer.Argument(callback=checked_id, metavar="SID")],
    task_hash: str,
) -> None:
    """Approve a waiting confirmation."""
    _answer(session_id, task_hash, True)


def deny(
    session_id: Annotated[str, typer.Argument(callback=checked_id, metavar="SID")],
    task_hash: str,
) -> None:
    """Deny a waiting confirmation."""
    _answer(session_id, task_hash, False)


def answer(
    session_id: Annotated[str, typer.Argument(callback=checked_id, metavar="SID")],
    task_hash: str,
    text: Annotated[str, typer.Argument(metavar="TEXT")],
) -> None:
    """Answer a waiting question (a confirmation takes approve or deny)."""
    reply = _client_call(lambda client: client.answer(session_id, task_hash, text=text))
    typer.echo(f"answered (by {printable(str(reply.body.get('by', '?')))})")


def mcp() -> None:
    """Serve the running gateway's MCP tools over stdio, for editors and other agents."""
    from adapters.http_client import GatewayClient
    from adapters.mcp.relay import relay
    from adapters.terminal.launch import client_token
    from gateway.client_settings import InvalidClientSettings, read_client_settings
    from gateway.logs import configure_logging

    # stdout carries the protocol: whatever is said goes to stderr.
    configure_logging("WARNING")
    try:
        settings = read_client_settings()
    except InvalidClientSettings as exc:
        fail(f"invalid settings:\n{exc}", 2)
    headers = GatewayClient(settings.gateway_url, client_token(settings)).headers
    asyncio.run(relay(settings.gateway_url, headers))


def link(
    code: Annotated[
        str | None, typer.Argument(help="A code asked for on another front-end (/link).")
    ] = None,
) -> None:
    """Alone: a one-time code that links another front-end's identity to yours (enter it there
    with /link CODE). With CODE: link your terminal identity to whoever asked for it."""

    async def work(client: GatewayClient) -> dict[str, Any]:
        if code is None:
            return (await client.call("POST", "/v1/me/link-code")).body
        return (await client.call("POST", "/v1/me/link", {"code": code})).body

    answer = _client_call(work)
    if code is None:
        until = datetime.fromtimestamp(answer["expires_at"] / 1000).strftime("%H:%M")
        typer.echo(
            f"{answer['code']}  (once, until {until}; whoever enters it reads your sessions)"
        )
    else:
        typer.echo(f"linked: {answer['identity']} with {', '.join(answer['linked']) or 'none'}")
