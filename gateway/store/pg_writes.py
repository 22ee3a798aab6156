"""Per-message writes as one PostgreSQL statement each.

Every statement of a transaction is a round trip between the event loop and the server, and
BEGIN and COMMIT are two more; on PostgreSQL those round trips, not the SQL, were most of what
a message cost the gateway. A data-modifying WITH does several inserts, updates and deletes in
one statement, which PostgreSQL commits on its own, all or nothing: one round trip.

The statements here do what the lean work of the same name does on SQLite (which has no
data-modifying WITH and pays nothing per statement); the store picks one or the other and
both are run by the same tests on both backends.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.store.journals import JournalRecord, journal_values
from gateway.store.message_reads import StoredMessage
from gateway.store.usage import UsageRecord, usage_values

# A finished run (gateway/store/runs.py, `RunArchive.finish_run`): its action_history row
# unless the task has one (a task replayed after a restart), and with that row its reply
# message (when there is one, with the session's last activity moved up) and its model usage;
# the task's journal and prompt answers deleted either way. Every part of a WITH sees the
# same snapshot, so the parts hang on `run`'s RETURNING, not on each other's rows. Each
# parameter is cast where it is used: PostgreSQL will not guess one type for its uses.
# Parameters: session, task, objective, tool results, reply, identity, time, sender.
_FINISH = """
WITH run AS (
    INSERT INTO action_history
        (session_id, task_hash, objective, tool_results, reply, identity, created_at)
    SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::bigint
    WHERE NOT EXISTS (
        SELECT 1 FROM action_history WHERE session_id = $1::text AND task_hash = $2::text
    )
    RETURNING 1
), touched AS (
    UPDATE session SET updated_at = CASE WHEN updated_at < $7 THEN $7 ELSE updated_at END
    WHERE id = $1::text AND $5::text <> '' AND EXISTS (SELECT 1 FROM run)
), reply AS (
    INSERT INTO messages
        (session_id, role, content, sender, send_at, task_hash, source_key, sender_key)
    SELECT $1::text, 'assistant', $5::text, $8::text, $7::bigint, $2::text, '', ''
    FROM run WHERE $5::text <> ''
    RETURNING id
), answers AS (
    DELETE FROM prompt_answer WHERE task_hash = $2::text
), journal AS (
    DELETE FROM task_journal WHERE task_hash = $2::text
){usage}
SELECT (SELECT id FROM reply)
"""
# The run's one model usage row, in `usage_values`' order from $9.
_USAGE = """, used AS (
    INSERT INTO usage (session_id, model, input, output, cache_read, cache_write, elapsed_ms,
        tool_calls, send_at, task_hash, identity, cost)
    SELECT $9::text, $10::text, $11::bigint, $12::bigint, $13::bigint, $14::bigint,
        $15::bigint, $16::text, $17::bigint, $18::text, $19::text, $20::double precision
    FROM run
)"""
FINISH_RUN = _FINISH.format(usage="")
FINISH_RUN_WITH_USAGE = _FINISH.format(usage=_USAGE)


def finish_run(
    session_id: str,
    task_hash: str,
    objective: str,
    tool_results: list[dict[str, Any]],
    reply: str,
    identity: str,
    at: int,
    sender: str,
    usage: UsageRecord | None,
) -> tuple[str, tuple[Any, ...]]:
    """The statement recording a finished run and its parameters; it returns one row holding
    the reply's message id (NULL when the run was recorded before, or has no reply)."""
    params: tuple[Any, ...] = (
        session_id,
        task_hash,
        objective,
        json.dumps(tool_results, ensure_ascii=False),
        reply,
        identity,
        at,
        sender,
    )
    if usage is None:
        return FINISH_RUN, params
    return FINISH_RUN_WITH_USAGE, params + tuple(usage_values(usage).values())


# A user's message and the journal of the task it starts (gateway/store/messages.py,
# `MessageArchive.take_in`), in a session that exists: the session's last activity moved up,
# the message archived unless its source key was archived before, the journal written with
# the message's id. A session without a row writes nothing here (the transaction makes it).
# Run again after a connection cut under it, it finds its journal (`landed`) and adds nothing.
# Parameters: time, session, role, content, sender, task, source key, sender key, then the
# journal's row (`journal_values`) without its message id.
TAKE_IN = """
WITH landed AS (
    SELECT user_message_id AS id FROM task_journal WHERE task_hash = $9::text
), touched AS (
    UPDATE session
    SET updated_at = CASE WHEN updated_at < $1::bigint THEN $1::bigint ELSE updated_at END
    WHERE id = $2::text AND NOT EXISTS (SELECT 1 FROM landed)
    RETURNING 1
), message AS (
    INSERT INTO messages
        (session_id, role, content, sender, send_at, task_hash, source_key, sender_key)
    SELECT $2::text, $3::text, $4::text, $5::text, $1::bigint, $6::text, $7::text, $8::text
    FROM touched
    ON CONFLICT DO NOTHING
    RETURNING id
), journal AS (
    INSERT INTO task_journal (task_hash, session_id, origin, text, user_message_id,
        user_sent_at, submitted_at, status, steps, prompt, updated_at)
    SELECT $9::text, $10::text, $11::text, $12::text, message.id, $13::bigint, $14::bigint,
        $15::text, $16::text, $17::text, $18::bigint
    FROM message
)
SELECT EXISTS (SELECT 1 FROM touched) OR EXISTS (SELECT 1 FROM landed),
    COALESCE((SELECT id FROM message), (SELECT id FROM landed))
"""


def take_in(
    message: StoredMessage, source_key: str, journal: JournalRecord
) -> tuple[str, tuple[Any, ...]]:
    """The statement archiving `message` with its task's `journal`, and its parameters. It
    returns one row: whether the session exists (when not, nothing was written), and the
    message's id (NULL when its source key was archived before)."""
    m = message
    row = journal_values(journal)
    without_id = row[:4] + row[5:]  # the message's id comes from the insert
    params = (m.send_at, m.session_id, m.role, m.content, m.sender, m.task_hash, source_key)
    return TAKE_IN, (*params, m.sender_key, *without_id)
