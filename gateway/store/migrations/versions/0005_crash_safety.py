"""Crash safety: task journals in the archive, inbound de-duplication, parts in flight.

- `task_journal`: one row per unfinished task, written in the same transaction as its message
  and removed in the same transaction as its reply, so a stored message always has a task
  that a restart takes up, and a finished one never runs again.
- `messages.source_key`: the platform's id of what brought the message in (a Telegram update,
  a Discord message); unique when not empty, so a platform delivering it again stores nothing.
- `outbox.parts_attempted`: how many parts of an entry's message were handed to the platform,
  against `parts_sent`, how many it is known to have accepted: a restart can tell a part that
  may have gone out from one that did not.

Revision ID: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_journal",
        sa.Column("task_hash", sa.String(64), primary_key=True),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("origin", sa.Text, nullable=False),  # JSON
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("user_message_id", sa.BigInteger, nullable=False),
        sa.Column("user_sent_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("submitted_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("status", sa.String(16), nullable=False, server_default="queued"),
        sa.Column("steps", sa.Text, nullable=False, server_default="[]"),  # JSON list
        sa.Column("prompt", sa.Text, nullable=False, server_default=""),  # JSON, "" for none
        sa.Column("updated_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index("ix_task_journal_session", "task_journal", ["session_id"])
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("source_key", sa.String(200), nullable=False, server_default=""))
    op.create_index(
        "ux_messages_source",
        "messages",
        ["source_key"],
        unique=True,
        sqlite_where=sa.text("source_key != ''"),
        postgresql_where=sa.text("source_key != ''"),
    )
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(
            sa.Column("parts_attempted", sa.Integer, nullable=False, server_default="0")
        )


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
