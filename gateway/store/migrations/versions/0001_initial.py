"""The initial schema: sessions, the message archive with its full-text index, runs, file
versions and usage.

Revision ID: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session",
        sa.Column("id", sa.String(140), primary_key=True),
        sa.Column("name", sa.String, nullable=False, server_default=""),
        sa.Column("self_id", sa.String, nullable=False, server_default=""),
        sa.Column("role", sa.Text, nullable=False, server_default=""),
        sa.Column("rule", sa.Text, nullable=False, server_default=""),
        sa.Column("model", sa.String, nullable=False, server_default=""),
        sa.Column("reasoning", sa.String, nullable=False, server_default=""),
        sa.Column("settings", sa.Text, nullable=False, server_default="{}"),
        sa.Column("created_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("updated_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index(
        "ux_session_self_id",
        "session",
        ["self_id"],
        unique=True,
        sqlite_where=sa.text("self_id != ''"),
        postgresql_where=sa.text("self_id != ''"),
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("role", sa.String, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("sender", sa.String, nullable=False, server_default=""),
        sa.Column("send_at", sa.BigInteger, nullable=False),
        sa.Column("task_hash", sa.String, nullable=False, server_default=""),
    )
    op.create_index("ix_messages_session_id", "messages", ["session_id", "id"])
    op.create_table(
        "action_history",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("task_hash", sa.String, nullable=False),
        sa.Column("objective", sa.Text, nullable=False, server_default=""),
        sa.Column("tool_results", sa.Text, nullable=False, server_default="[]"),
        sa.Column("reply", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.UniqueConstraint("session_id", "task_hash", name="ux_action_history_task"),
    )
    op.create_table(
        "file_history",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("task_id", sa.String, nullable=False, server_default=""),
        sa.Column("dir", sa.String, nullable=False),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("content", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_table(
        "usage",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("model", sa.String, nullable=False),
        sa.Column("input", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("output", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cache_read", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cache_write", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("elapsed_ms", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("tool_calls", sa.Text, nullable=False, server_default="[]"),
        sa.Column("send_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index("ix_usage_send_at", "usage", ["send_at"])
    op.create_index("ix_usage_session_id", "usage", ["session_id"])

    if op.get_bind().dialect.name == "sqlite":
        _sqlite_fts()
    else:
        _postgres_trigram()


def _sqlite_fts() -> None:
    # External-content FTS5 over messages.content, kept in step by triggers. The trigram
    # tokenizer matches any substring of three or more characters, which is what makes
    # searching Chinese or Japanese text (no spaces between words) work.
    op.execute(
        "CREATE VIRTUAL TABLE messages_fts5 USING fts5("
        "content, content='messages', content_rowid='id', tokenize='trigram')"
    )
    op.execute(
        "CREATE TRIGGER messages_fts5_ai AFTER INSERT ON messages BEGIN "
        "INSERT INTO messages_fts5(rowid, content) VALUES (new.id, new.content); END"
    )
    op.execute(
        "CREATE TRIGGER messages_fts5_ad AFTER DELETE ON messages BEGIN "
        "INSERT INTO messages_fts5(messages_fts5, rowid, content) "
        "VALUES ('delete', old.id, old.content); END"
    )
    op.execute(
        "CREATE TRIGGER messages_fts5_au AFTER UPDATE OF content ON messages BEGIN "
        "INSERT INTO messages_fts5(messages_fts5, rowid, content) "
        "VALUES ('delete', old.id, old.content); "
        "INSERT INTO messages_fts5(rowid, content) VALUES (new.id, new.content); END"
    )


def _postgres_trigram() -> None:
    # Substring search with the same meaning as SQLite's trigram index: a pg_trgm GIN index
    # serves ILIKE '%term%' for any script, where a tsvector would miss CJK substrings.
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.execute("CREATE INDEX ix_messages_content_trgm ON messages USING gin (content gin_trgm_ops)")


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
