"""Each member's data on request: everything stored about them as one JSON document, and the
erasure of what they wrote (and what the agent answered them) everywhere it is kept.

An erasure runs with the gateway up. The member's unfinished tasks are canceled first and
waited for, so none writes after it; each session is then redacted in its archive turn (the
lock every message write of the session takes), its rows and its files together. What stays:
usage rows (counts, no text), the identity links, and one audit line per session and in the
log naming the identity, who asked, and how many rows — never what was said.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any, Final

from gateway.agents.tool_memory import ToolMemory
from gateway.clock import now_ms
from gateway.engine.errors import TaskNotFound
from gateway.engine.router import Router
from gateway.events import NOBODY as NOBODY
from gateway.logs import get_logger
from gateway.member_data.files import (
    drop_resume_state,
    redact_action_log,
    redact_history,
    redact_inputs,
)
from gateway.store.files import Summary
from gateway.store.fslock import SessionDirectoryMissing
from gateway.store.member_data import Footprint, MemberRows, SessionErasure, SessionTrace
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

FORMAT: Final = "agenvoy-member-export/1"
# How long an erasure waits for one canceled task of the member to end.
CANCEL_WAIT_SECONDS: Final = 10.0


class NotAMember(ValueError):
    """The identity is no one member's (the shared token, an anonymous caller)."""

    def __init__(self, identity: str) -> None:
        super().__init__(
            f"{identity or 'this caller'} stands for no one member; "
            "use a credential of your own (a token issued to you, or your chat account)"
        )


class OpenTasks(RuntimeError):
    """The member has tasks this process cannot stop (no engine here)."""

    def __init__(self, count: int) -> None:
        super().__init__(
            f"the member has {count} task(s) not finished; cancel them or erase through the "
            "running gateway (POST /v1/me/forget, /forget-me)"
        )


# Cancels one task (session, task, by whom) and waits for its end; None: no engine here.
Canceler = Callable[[str, str, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Erasure:
    identity: str
    identities: tuple[str, ...]
    sessions: int
    messages: int  # rows redacted: theirs and the agent's replies to them
    own_messages: int
    replies: int
    runs: int
    journals: int
    deliveries: int
    embeddings: int
    summaries: int  # dropped, to be folded again
    schedules: int
    history_lines: int
    log_lines: int
    canceled: int
    inputs: int = 0  # terminal input history entries
    resume_files: int = 0  # backends' resume state, dropped
    names: int = 0  # session names blanked
    tool_memory: int = 0  # cached tool results and remembered failures
    memories: int = 0  # what they asked the bot to remember

    def counts(self) -> dict[str, int]:
        return {
            "sessions": self.sessions,
            "messages": self.messages,
            "own_messages": self.own_messages,
            "replies": self.replies,
            "runs": self.runs,
            "journals": self.journals,
            "deliveries": self.deliveries,
            "embeddings": self.embeddings,
            "summaries": self.summaries,
            "schedules": self.schedules,
            "history_lines": self.history_lines,
            "log_lines": self.log_lines,
            "canceled_tasks": self.canceled,
            "inputs": self.inputs,
            "resume_files": self.resume_files,
            "session_names": self.names,
            "tool_memory": self.tool_memory,
            "memories": self.memories,
        }

    def audit(self, by: str) -> str:
        shown = " ".join(f"{k}={v}" for k, v in self.counts().items())
        return f"erasure of identity {self.identity} by {by or self.identity}: {shown}"


def canceler(router: Router) -> Canceler:
    """Cancel a task through the engine (here or on the instance that runs it) and wait for
    it to end."""

    async def cancel(session_id: str, task_hash: str, by: str) -> None:
        await router.cancel(session_id, task_hash, by=by)
        with contextlib.suppress(TaskNotFound):
            await router.wait(task_hash, CANCEL_WAIT_SECONDS)

    return cancel


class MemberData:
    def __init__(
        self,
        store: SessionStore,
        cancel: Canceler | None = None,
        tool_memory: ToolMemory | None = None,
    ) -> None:
        self.store = store
        self.rows = MemberRows(store.db)
        self._cancel = cancel
        self._tool_memory = tool_memory

    async def identities(self, identity: str) -> frozenset[str]:
        if not identity or identity in NOBODY:
            raise NotAMember(identity)
        return await self.store.ownership.linked(identity)

    async def export(self, identity: str) -> dict[str, Any]:
        """Everything stored about the member of `identity`, as one JSON-ready document."""
        identities = await self.identities(identity)
        found = await self.rows.export(identities)
        return {
            "format": FORMAT,
            "identity": identity,
            "identities": sorted(identities),
            "exported_at": now_ms(),
            **found,
        }

    async def preview(self, identity: str) -> Footprint:
        """What an erasure would take (for the confirmation step)."""
        return await self.rows.footprint(await self.identities(identity))

    async def forget(self, identity: str, *, by: str) -> Erasure:
        """Erase the member's messages and the replies to them everywhere."""
        identities = await self.identities(identity)
        canceled = await self._stop_tasks(identities, by)
        footprint = await self.rows.footprint(identities)
        totals = dict.fromkeys(("messages", "runs", "journals", "deliveries", "embeddings"), 0)
        summaries = history_lines = log_lines = 0
        for sid, trace in sorted(footprint.sessions.items()):
            done, lines, logged = await self._erase_session(sid, trace, footprint.quotes)
            for key in totals:
                totals[key] += getattr(done, key)
            summaries += done.summary_dropped
            history_lines += lines
            log_lines += logged
        schedules = await self.rows.erase_schedules(identities)
        memories = await self.rows.erase_memories(identities)
        names = await self.rows.erase_names(identities, footprint.quotes)
        reached = sorted(set(footprint.sessions) | footprint.owned)
        inputs = resume_files = 0
        for sid in reached:
            typed, resumed = await asyncio.to_thread(
                self._erase_local_files, sid, footprint.quotes, whole=sid in footprint.owned
            )
            inputs += typed
            resume_files += resumed
        tool_memory = 0
        if self._tool_memory is not None:
            tool_memory = await self._tool_memory.forget_for_erasure(reached)
        await self.rows.compact()
        erasure = Erasure(
            identity,
            tuple(sorted(identities)),
            len(footprint.sessions),
            own_messages=footprint.own,
            replies=footprint.replies,
            summaries=summaries,
            schedules=schedules,
            history_lines=history_lines,
            log_lines=log_lines,
            canceled=canceled,
            inputs=inputs,
            resume_files=resume_files,
            names=names,
            tool_memory=tool_memory,
            memories=memories,
            **totals,
        )
        line = erasure.audit(by)
        for sid in footprint.sessions:
            with contextlib.suppress(FileNotFoundError):
                await self.store.log_action(sid, "system", line, identity=by or identity)
        log.info("member data erased", identity=identity, by=by, **erasure.counts())
        return erasure

    async def _stop_tasks(self, identities: frozenset[str], by: str) -> int:
        open_tasks = await self.rows.open_tasks(identities)
        if not open_tasks:
            return 0
        if self._cancel is None:
            raise OpenTasks(len(open_tasks))
        for sid, task in open_tasks:
            await self._cancel(sid, task, by or "erasure")
        return len(open_tasks)

    def _erase_local_files(
        self, sid: str, quotes: Collection[str], *, whole: bool
    ) -> tuple[int, int]:
        """The terminal input history and the backends' resume state of one session."""
        folder = self.store.files(sid).dir
        if not folder.is_dir():
            return 0, 0
        return redact_inputs(folder, quotes, whole=whole), drop_resume_state(folder)

    async def _erase_session(
        self, sid: str, trace: SessionTrace, quotes: Collection[str]
    ) -> tuple[SessionErasure, int, int]:
        files = self.store.files(sid)
        # The session's message writes wait meanwhile, so no line is filed from a row read
        # before its redaction.
        async with self.store._archive_turn(sid):
            done = await self.rows.erase_session(sid, trace, quotes)

            def redact_files() -> tuple[int, int]:
                try:
                    lines = redact_history(files.history, trace.message_ids, trace.texts, quotes)
                except SessionDirectoryMissing:
                    return 0, 0
                logged = redact_action_log(files.action_log, trace.tasks, trace.texts, quotes)
                for task in trace.tasks:
                    files.remove_pending(task)
                if done.summary_dropped:
                    files.write_summary(Summary("", done.reset_at, now_ms()))
                return lines, logged

            lines, logged = await asyncio.to_thread(redact_files)
        return done, lines, logged
