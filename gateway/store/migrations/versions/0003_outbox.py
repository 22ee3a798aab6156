"""The outbox: every outbound reply and prompt, recorded before it is sent.

Revision ID: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("task_hash", sa.String(64), nullable=False),
        sa.Column("chunk_index", sa.Integer, nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),  # {"origin": ..., "event": ...}
        sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("platform_message_id", sa.String, nullable=False, server_default=""),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("delivered_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.UniqueConstraint("task_hash", "chunk_index", "content_hash", name="ux_outbox_chunk"),
    )
    op.create_index("ix_outbox_status", "outbox", ["status", "platform"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
