"""How `agenvoy send` ends: what it prints for the task's last state, and its exit status,
one for each way a message can end (README, "Commands")."""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Any

import typer

from gateway.cli_support import printable

if TYPE_CHECKING:
    from adapters.http_client import GatewayClient


class Exit(IntEnum):
    ANSWERED = 0
    FAILED = 1  # the task failed, or the gateway refused or could not be reached
    # 2: bad input or settings (the command line's own)
    STILL_RUNNING = 3  # still queued or running, or waiting for an answer, after --wait
    COLLECTED = 4  # answered by a later task together with the messages around it
    STEERED = 5  # taken in by the task that was running
    CANCELED = 6
    DENIED = 7  # a confirmation it asked for was denied (or timed out)


def task_of(body: dict[str, Any]) -> str:
    return printable(f"{body.get('session_id')} {body.get('task_hash')}")


def say(line: str) -> None:
    """A notice about the message rather than its reply: on stderr, so stdout is the reply."""
    typer.secho(line, err=True, fg="yellow")


def waiting_line(body: dict[str, Any]) -> str:
    """How to answer the prompt the task waits on, from another terminal."""
    if body["pending"].get("kind") == "confirm":
        return f"waiting for an answer: agenvoy approve|deny {task_of(body)}"
    return f"waiting for an answer: agenvoy answer {task_of(body)} 'TEXT'"


def _denied(body: dict[str, Any]) -> bool:
    answers = [e for e in body.get("events", []) if e.get("kind") == "answer"]
    return any(e.get("prompt") == "confirm" and e.get("approved") is False for e in answers)


async def _steered(client: GatewayClient, body: dict[str, Any], into: str) -> bool:
    """Steered (into a task that came before this message) rather than collected (into the
    newest of those that waited, which came after it)."""
    mine = [e.get("at", 0) for e in body.get("events", []) if e.get("kind") == "user"]
    theirs = (await client.task(body["session_id"], into, 0)).body
    firsts = [e.get("at", 0) for e in theirs.get("events", []) if e.get("kind") == "user"]
    return bool(mine and firsts) and firsts[0] < mine[0]


async def finish(
    client: GatewayClient, body: dict[str, Any], wait: float, notices: Notices | None = None
) -> Exit:
    """Print what became of the message, and the status `send` exits with."""
    notices = notices or Notices()
    notices.tell(body)
    status = body.get("status")
    if status == "collected" and (into := str(body.get("collected_into") or "")):
        steered = await _steered(client, body, into)
        where = printable(f"{body['session_id']} {into}")
        say(f"steered into the running task {where}" if steered else f"collected into {where}")
        other = (await client.task(body["session_id"], into, wait)).body
        if other.get("status") == "done":
            typer.echo(printable(str(other.get("text", "")), body=""))
        return Exit.STEERED if steered else Exit.COLLECTED
    if status == "canceled":
        say(f"canceled: {task_of(body)}")
        return Exit.CANCELED
    if status == "done":
        typer.echo(printable(str(body.get("text", "")), body=""))
        return Exit.DENIED if _denied(body) else Exit.ANSWERED
    if body.get("error"):
        typer.secho(printable(str(body["error"]), body=""), fg="red", err=True)
        return Exit.FAILED
    await notices.why_waiting(client, body)
    typer.echo(f"still running: {task_of(body)}")
    return Exit.STILL_RUNNING


class Notices:
    """What `send` says about its message while it is not answered: the notices among the
    task's events ("queued (2 ahead)", "collected 3 messages") and the prompt it waits behind,
    each said once however often the task is asked for."""

    def __init__(self) -> None:
        self._told: set[tuple[int, str]] = set()
        self._behind: set[str] = set()

    def tell(self, body: dict[str, Any]) -> None:
        for event in body.get("events") or ():
            if event.get("kind") != "notice":
                continue
            key = (int(event.get("at") or 0), str(event.get("text", "")))
            if key not in self._told:
                self._told.add(key)
                say(printable(key[1]))

    async def queued(self, client: GatewayClient, body: dict[str, Any]) -> None:
        """The message is not answered yet: say where it waits, and behind what."""
        view = (await client.task(str(body["session_id"]), str(body["task_hash"]), 0)).body
        self.tell(view)
        await self.why_waiting(client, view)

    async def why_waiting(self, client: GatewayClient, body: dict[str, Any]) -> None:
        """A message queued behind a task that waits for an answer waits as long as it
        does: say how to give that answer."""
        if body.get("status") != "queued":
            return
        prompts = await client.pending(str(body["session_id"]))
        behind = waiting_behind(prompts, str(body.get("task_hash")))
        if behind is not None and behind[0] not in self._behind:
            self._behind.add(behind[0])
            say(behind[1])


def waiting_behind(prompts: list[dict[str, Any]], task_hash: str) -> tuple[str, str] | None:
    """The task a queued one waits behind that itself waits for an answer (from the session's
    open prompts), and the line that says how to answer it."""
    for prompt in prompts:
        ahead = str(prompt.get("task_hash"))
        if ahead != task_hash:
            verb = "approve|deny" if prompt.get("kind") == "confirm" else "answer"
            task = printable(f"{prompt.get('session_id')} {ahead}")
            return ahead, f"waiting behind a task that waits for an answer: agenvoy {verb} {task}"
    return None
