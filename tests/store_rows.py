"""What a session has in the database, table by table, for tests of deleting, renaming and
reaping sessions.

Every table of the database is looked at, not a list of the expected ones: a table added later
is either understood here or makes the check fail until someone says what it holds.
"""

from __future__ import annotations

from sqlalchemy import inspect, text
from sqlmodel import Session, col, select

from gateway.memory.embedders import LocalEmbedder
from gateway.memory.indexer import Indexer
from gateway.ownership import ShareMode
from gateway.store.db import Database
from gateway.store.files import Summary
from gateway.store.journals import JournalRecord
from gateway.store.message_reads import StoredMessage
from gateway.store.models import PER_SESSION_TABLES, OutboxRow, ScheduleRow
from gateway.store.outbox import OutboxEntry, OutboxItem, outbox_item
from gateway.store.request_keys import RequestKey
from gateway.store.sessions import RunRecord, SessionStore
from gateway.store.usage import UsageRecord

# Tables that hold no session's rows: the schema version, and the storage of the SQLite FTS5
# index, whose entries are checked through the index itself.
UNRELATED = {"alembic_version", "messages_fts5_config", "messages_fts5_data", "messages_fts5_idx"}
# Tables of people rather than sessions: links, link codes and wrong ones entered, quotas,
# console sign-ins, and bans, which outlive a chat's session (a chat made again keeps its bans).
UNRELATED |= {"identity_link", "link_code", "link_attempt", "quota", "console_signin", "ban"}
# The operator's agent configuration: profiles, their bindings to places (a binding may name one
# session, and outlives it as a ban does, so a chat made again keeps its agent) and the change
# counter.
UNRELATED |= {"agent_profile", "agent_binding", "agent_config"}
# The per-user API tokens, and the log of configuration changes (an audit trail that outlives
# what it names, a session's binding or a chat's quota among them).
UNRELATED |= {"api_token", "config_change"}
# What members asked the bot to remember: the member's, kept when the session it was asked in
# goes (their erasure deletes it).
UNRELATED |= {"member_memory"}
# Attached documents: an admin's, bound to a target as a binding is (one that names a session
# outlives it, as its binding does); removed by `agenvoy knowledge remove`.
UNRELATED |= {"knowledge_document", "knowledge_chunk"}
# The platforms' connections: the operator's.
UNRELATED |= {"platform_connection"}
# Every table a session has rows in once it has talked, run a task and saved a file.
SESSION_TABLES = {"session", *(table.name for table in PER_SESSION_TABLES)}


async def populate(store: SessionStore, session_id: str, marker: str) -> None:
    """Give the session a row in every table a session can have rows in; `marker` is a word
    its messages contain (and no other session's should)."""
    task = f"task-{marker}"
    await store.ensure(session_id)
    await store.ownership.share(session_id, f"http:{marker}", ShareMode.read)
    await store.append_message(session_id, "user", f"tell me about {marker}s")
    reply = f"{marker}s are fine"
    entry = OutboxEntry(
        session_id, task, 0, "reply", "http", {"event": {"type": "reply", "text": reply}}
    )
    run = RunRecord(session_id, task, f"about {marker}s", reply, [{"tool": "write_file"}])
    await store.finish_run(run, reply, sender="agent", outbox=[entry])
    await store.record_file_version(session_id, task, "/work", f"{marker}.txt", "first")
    # A second task, not finished: its journal.
    waiting = f"wait-{marker}"

    def journal(message: StoredMessage) -> JournalRecord:
        return JournalRecord(waiting, session_id, {}, message.content, message.id, 0, 0)

    # Sent with an Idempotency-Key: the key's row names the session.
    request = RequestKey.of("http:ann", f"key-{marker}", {"content": marker}, 0)
    await store.take_in(
        session_id,
        f"more {marker}s",
        sender="ann",
        task_hash=waiting,
        journal=journal,
        source_key=request.key,
        request=request,
    )
    # The summary covers the session's own first message (as a fold's cursor always does).
    first = (await store.recent_messages(session_id, 100))[0].id
    await store.save_summary(session_id, Summary(f"talked about {marker}s", first, 0))
    await store.first_delivery(f"telegram:1:{marker}", session_id)  # a command it was sent
    # Its prompt answered on some instance.
    await store.claim_answer(session_id, waiting, 0, {"approved": True, "by": "ann"})
    await store.usage.record(UsageRecord(session_id, "model-a", input=3, output=5))
    schedule = ScheduleRow(session_id=session_id, spec="every 1h", prompt=f"count {marker}s")
    await store.schedules.add(schedule)
    # Its messages and summary embedded (semantic recall), with their cursor.
    await Indexer(store.vectors, LocalEmbedder()).embed_session(session_id)


async def rows_of(db: Database, session_id: str, *, marker: str) -> dict[str, int]:
    """How many rows of each table belong to `session_id`; tables with none are left out.

    The SQLite full-text index counts its entries for `marker` whose message is the session's
    or is gone, and index entries left without a message; it must also pass FTS5's own
    integrity check against the messages it indexes.
    """

    def count(session: Session) -> dict[str, int]:
        conn = session.connection()
        inspector = inspect(conn)
        params = {"sid": session_id, "marker": f'"{marker}"'}
        found: dict[str, int] = {}
        for table in inspector.get_table_names():
            columns = {column["name"] for column in inspector.get_columns(table)}
            if table in UNRELATED:
                continue
            if table == "session":
                sql = "SELECT count(*) FROM session WHERE id = :sid"
            elif "session_id" in columns:
                sql = f"SELECT count(*) FROM {table} WHERE session_id = :sid"
            elif table == "messages_fts5":
                sql = (
                    "SELECT count(*) FROM messages_fts5 f LEFT JOIN messages m ON m.id = f.rowid "
                    "WHERE messages_fts5 MATCH :marker AND (m.id IS NULL OR m.session_id = :sid)"
                )
            elif table == "embedding_pgvector":  # pgvector's copy of `embedding` vectors
                sql = (
                    "SELECT count(*) FROM embedding_pgvector v JOIN embedding e ON e.id = v.id "
                    "WHERE e.session_id = :sid"
                )
            elif table == "messages_fts5_docsize":
                sql = (
                    "SELECT count(*) FROM messages_fts5_docsize d "
                    "WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = d.id)"
                )
            else:
                raise AssertionError(f"table {table}: say whether it holds a session's rows")
            rows = conn.execute(text(sql), params).scalar_one()
            if rows:
                found[table] = rows
        return found

    def check_index(session: Session) -> None:
        # rank 1: compare the index with the messages it indexes, not only with itself.
        session.connection().execute(
            text("INSERT INTO messages_fts5(messages_fts5, rank) VALUES ('integrity-check', 1)")
        )

    if db.dialect == "sqlite":
        await db.write(check_index)
    return await db.read(count)


async def outbox_of_task(db: Database, task_hash: str) -> list[OutboxItem]:
    """The outbox entries a task recorded, oldest first."""
    stmt = (
        select(OutboxRow).where(col(OutboxRow.task_hash) == task_hash).order_by(col(OutboxRow.id))
    )

    def work(session: Session) -> list[OutboxItem]:
        return [outbox_item(row) for row in session.exec(stmt).all()]

    return await db.read(work)
