"""The message archive: every message of a session as a SQL row, filed in history.json in the
order of its archive id."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Literal

from gateway.clock import now_ms
from gateway.ids import validate_hash, validate_session_id
from gateway.logs import get_logger
from gateway.store import pg_writes
from gateway.store.base import SessionTaken, UnknownSession
from gateway.store.fslock import SessionDirectoryMissing
from gateway.store.history_file import HistoryMessage
from gateway.store.journals import JournalRecord, insert_journal
from gateway.store.lean import Lean, Row
from gateway.store.message_reads import MessageReads, StoredMessage
from gateway.store.read_ahead import ReadAhead
from gateway.store.request_keys import RequestKey, forget_expired, keep
from gateway.store.resync import HISTORY_CATCH_UP, ResyncView, journals_and_view, resync_view
from gateway.store.summaries import NoSummaryRow, Position, summary_state

log = get_logger(__name__)

# How many of history.json's last lines are compared with the archive by `resync_history`.
HISTORY_RESYNC_TAIL = 50

# Lean statements (gateway.store.lean): every message runs them.
_TOUCH_SESSION = (
    "UPDATE session SET updated_at = CASE WHEN updated_at < ? THEN ? ELSE updated_at END"
    " WHERE id = ?"
)
_NEW_SESSION = (
    "INSERT INTO session (id, name, self_id, role, rule, model, reasoning, settings, created_at,"
    " updated_at, owner) VALUES (?, '', '', '', '', '', '', '{}', ?, ?, ?) ON CONFLICT DO NOTHING"
)
_SESSION_OWNER = "SELECT owner FROM session WHERE id = ?"
_INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, role, content, sender, send_at, task_hash, source_key,"
    " sender_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_RETURNING_ID = " RETURNING id"
# A message the platform delivered before (same source key) is not stored again.
_INSERT_KEYED = _INSERT_MESSAGE + " ON CONFLICT DO NOTHING" + _RETURNING_ID
_INSERT_MESSAGE += _RETURNING_ID


def touch_session(sql: Lean, session_id: str, at: int) -> bool:
    """Move the session's last activity up to `at`; False when the session has no row."""
    return bool(sql.run(_TOUCH_SESSION, at, at, session_id))


def new_session(sql: Lean, session_id: str, at: int, owner: str = "") -> None:
    """Add the session's row (with default settings) unless it has one."""
    sql.run(_NEW_SESSION, session_id, at, at, owner)


def insert_message(sql: Lean, message: StoredMessage, source_key: str = "") -> int | None:
    """Archive `message` (its `id` is ignored); returns the id the archive gave it, or None
    when a message with the same `source_key` is archived already."""
    m = message
    values = (m.session_id, m.role, m.content, m.sender, m.send_at, m.task_hash, source_key)
    found = sql.value(_INSERT_KEYED if source_key else _INSERT_MESSAGE, *values, m.sender_key)
    if found is None:
        assert source_key, "an insert without a source key always returns its id"
        return None
    return int(found)


def history_line(message: StoredMessage) -> HistoryMessage:
    return HistoryMessage(
        message.role, message.content, message.send_at, message.sender, message.id
    )


class MessageArchive(MessageReads):
    positions_ahead: ReadAhead[Position]  # the store's, shared with `SummaryArchive`

    async def append_message(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        sender: str = "",
        send_at: int | None = None,
        task_hash: str = "",
        write_history: bool = True,
        create_session: bool = False,
    ) -> StoredMessage:
        """Archive one message in SQL, then add it to history.json.

        SQL goes first: its id is what the summary cursor refers to, and it is the durable copy
        from which history.json is caught up. `write_history=False` archives only (imports,
        and the benchmark separating the two costs). `create_session` makes a session that
        does not exist yet (its folder, and its row in the message's own transaction) instead
        of failing with UnknownSession.
        """
        stored = await self._append(
            session_id,
            role,
            content,
            sender=sender,
            send_at=send_at,
            task_hash=task_hash,
            write_history=write_history,
            create_session=create_session,
        )
        assert stored is not None  # no source key: never a duplicate
        return stored

    async def take_in(
        self,
        session_id: str,
        content: str,
        *,
        sender: str,
        sender_key: str = "",
        owner: str = "",
        claim: bool = False,
        task_hash: str = "",
        source_key: str = "",
        request: RequestKey | None = None,
        journal: Callable[[StoredMessage], JournalRecord] | None = None,
        then: Callable[[StoredMessage], None] | None = None,
    ) -> StoredMessage | None:
        """Archive a user's message, creating its session if need be, and with it — in the same
        transaction — the journal of the task `task_hash` it starts (`journal`, made from the
        stored message). None when `source_key` shows the platform delivered it before, or
        `request` (whose key is the source key) was sent before within its 24 hours.

        `then` runs with the stored message right after its history.json line, in the same
        hand-off off the event loop (a file write that belongs with it, an action.log line).
        `owner` owns the session if this message makes it (gateway/ownership.py). With
        `claim` (the writer was let in because the session did not exist), a session found
        made meanwhile by another owner raises `SessionTaken` and nothing is written: the
        insert of its row is the one place two makers of the same new id are told apart."""
        return await self._append(
            session_id,
            "user",
            content,
            sender=sender,
            sender_key=sender_key,
            owner=owner,
            claim=claim,
            task_hash=task_hash,
            create_session=True,
            source_key=source_key,
            request=request,
            journal=journal,
            then=then,
        )

    async def _append(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        sender: str,
        sender_key: str = "",
        owner: str = "",
        claim: bool = False,
        send_at: int | None = None,
        task_hash: str = "",
        write_history: bool = True,
        create_session: bool = False,
        source_key: str = "",
        request: RequestKey | None = None,
        journal: Callable[[StoredMessage], JournalRecord] | None = None,
        then: Callable[[StoredMessage], None] | None = None,
    ) -> StoredMessage | None:
        validate_session_id(session_id)
        assert request is None or request.key == source_key, "a request's key is its source key"
        if task_hash:
            validate_hash(task_hash)
        at = send_at if send_at is not None else now_ms()
        # PostgreSQL text cannot hold NUL; store the same replacement character on every backend.
        content = content.replace("\x00", "\ufffd")
        sender = sender.replace("\x00", "\ufffd")
        sender_key = sender_key.replace("\x00", "\ufffd")
        unfiled = StoredMessage(0, session_id, role, content, sender, at, task_hash, sender_key)

        def work(sql: Lean) -> StoredMessage | None:
            if not touch_session(sql, session_id, at):
                if not create_session:
                    raise UnknownSession(session_id)
                new_session(sql, session_id, at, owner)
            if claim and sql.value(_SESSION_OWNER, session_id) != owner:
                raise SessionTaken(session_id)
            if request is not None:
                forget_expired(sql, request)
            message_id = insert_message(sql, unfiled, source_key)
            if message_id is None:
                return None
            stored = replace(unfiled, id=message_id)
            if request is not None:
                keep(sql, request, session_id, task_hash=task_hash)
            if journal is not None:
                insert_journal(sql, journal(stored))
            return stored

        if not write_history:
            return await self.db.write_lean(work)

        def file_it(stored: StoredMessage | None) -> None:
            # The folder is made here, in the write's own hand-off rather than one of its own:
            # a crash before it leaves a row whose line the next write files (catch-up). Only
            # when it is missing: two mkdir calls on every message showed in profiles.
            if stored is None:
                if create_session:
                    self.dirs.create(session_id)
                return
            try:
                self.file_committed(session_id, [history_line(stored)])
            except SessionDirectoryMissing:
                if not create_session:
                    raise
                self.dirs.create(session_id)
                self.file_committed(session_id, [history_line(stored)])
            if then is not None:
                then(stored)

        async with self._archive_turn(session_id):
            await self._catch_up_once(session_id)
            # A claim or a request key: checks that go with the write in its transaction.
            plain = not claim and request is None
            if self.db.dialect == "postgresql" and journal is not None and plain:
                taken = await self._take_in_at_once(unfiled, source_key, journal, file_it)
                if taken is not False:
                    return taken
            return await self.db.write_lean(work, after_commit=file_it)

    async def _take_in_at_once(
        self,
        unfiled: StoredMessage,
        source_key: str,
        journal: Callable[[StoredMessage], JournalRecord],
        file_it: Callable[[StoredMessage | None], None],
    ) -> StoredMessage | Literal[False] | None:
        """On PostgreSQL, a message and its task's journal in a session that exists, as one
        statement (gateway/store/pg_writes.py): one round trip where the transaction takes
        five. False when the session has no row: nothing was written, the transaction makes it."""
        statement, params = pg_writes.take_in(unfiled, source_key, journal(unfiled))
        stored: list[StoredMessage | None] = []

        def file_returned(rows: list[Row]) -> None:
            found, message_id = rows[0]
            if found:
                stored.append(replace(unfiled, id=int(message_id)) if message_id else None)
                file_it(stored[0])

        # Run again after a cut connection, it finds the journal it wrote and adds nothing.
        await self.db.write_one(statement, *params, repeatable=True, after_commit=file_returned)
        return stored[0] if stored else False

    async def catch_up_history(self, session_id: str) -> int:
        """File in history.json the archived messages it lacks — the tail a crash or a
        shutdown cut between a commit and its line; returns how many were filed. A session
        whose first message was cut off there has no folder yet: it is made."""
        async with self._archive_turn(session_id):
            filed = await self._catch_up(session_id, create=True)
            self.files(session_id).history_checked = True
            return filed

    async def journals_and_resync_view(
        self, session_id: str
    ) -> tuple[list[JournalRecord], ResyncView]:
        """What the instance that runs a session reads before each of its tasks: the session's
        journals, and what `resync_history` compares, in one read (gateway/store/resync.py),
        which also reads ahead where the task's context starts (`positions_ahead`)."""
        validate_session_id(session_id)
        window = self.settings.history_window
        async with self._archive_turn(session_id):
            tail = await self._resync_tail(session_id)
            journals, view, position = await self.db.read_lean(
                lambda sql: journals_and_view(sql, session_id, tail, window)
            )
        self.positions_ahead.put(session_id, window, position)
        return journals, view

    async def _resync_tail(self, session_id: str) -> list[HistoryMessage] | None:
        history = self.files(session_id).history
        try:
            return await self.db.beside(partial(history.tail, HISTORY_RESYNC_TAIL))
        except FileNotFoundError:
            return None

    async def resync_history(self, session_id: str, seen: ResyncView | None = None) -> int:
        """Make history.json's recent lines those of the archive, gaps included. Several
        instances archive one session's messages and each files only the lines of what it
        stored; the instance that runs the session brings its copy in line before each task
        (`seen`: what `journals_and_resync_view` read for it just before). Returns how many
        lines were missing."""
        validate_session_id(session_id)
        files = self.files(session_id)
        async with self._archive_turn(session_id):
            if seen is None:
                tail = await self._resync_tail(session_id)
                # Ids only, and the summary, in one read; message bodies only when the two
                # copies differ.
                seen = await self.db.read_lean(lambda sql: resync_view(sql, session_id, tail))
            tail = seen.tail
            if tail is None:
                return 0
            ids = [m.id for m in tail if m.id]
            first = seen.first
            state = seen.state
            if isinstance(state, NoSummaryRow):
                state = await summary_state(self.db, files, session_id)
            if state and any(m.id and m.id <= state.reset_at for m in tail):
                # A /reset given on another instance: the window starts again after it.
                await asyncio.to_thread(files.history.replace, [])
                return await self._catch_up(session_id)
            if not ids:
                return await self._catch_up(session_id)
            if list(seen.archived_ids) == [i for i in ids if i >= first]:
                return 0
            archived = await self.messages_after(session_id, first - 1, limit=HISTORY_CATCH_UP)
            missing = len({m.id for m in archived} - set(ids))

            def rewrite() -> None:
                kept = [m for m in files.history.read() if not m.id or m.id < first]
                files.history.replace(kept + [history_line(m) for m in archived])

            try:
                await asyncio.to_thread(rewrite)
            except SessionDirectoryMissing:
                raise
            except OSError as exc:
                # A cache left behind (a full disk): the session's next write catches it up,
                # and its task runs meanwhile.
                files.history_checked = False
                log.error("history.json not brought in line", session=session_id, error=str(exc))
                return missing
            self.files(session_id).history_checked = True
            log.info("history.json brought in line with the archive", session=session_id)
            return missing

    async def _catch_up_once(self, session_id: str) -> None:
        """The first write of a session in this process checks its history.json first."""
        if not self.files(session_id).history_checked:
            await self._catch_up(session_id)
            self.files(session_id).history_checked = True

    async def _catch_up(self, session_id: str, *, create: bool = False) -> int:
        files = self.files(session_id)
        try:
            last = await asyncio.to_thread(files.history.tail, 1)
        except FileNotFoundError:
            if not create:
                return 0  # no folder yet: nothing was ever filed, nothing is missing
            await asyncio.to_thread(self.dirs.create, session_id)
            last = []
        state = await summary_state(self.db, files, session_id) if not last else None
        reset_at = state.reset_at if state else 0
        if last and not last[-1].id:
            return 0  # written before lines carried ids: there is no telling what is missing
        # An empty file after /reset starts at the reset's cursor; a new one at the beginning.
        after = last[-1].id if last else reset_at
        missing = await self.messages_after(session_id, after, limit=HISTORY_CATCH_UP)
        if missing:
            await asyncio.to_thread(files.history.extend, [history_line(m) for m in missing])
            log.warning(
                "history.json caught up with the archive", session=session_id, filed=len(missing)
            )
        return len(missing)
