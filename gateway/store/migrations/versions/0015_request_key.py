"""Requests a client may send again.

- `request_key`: each `Idempotency-Key` a caller sent (hashed with who it is), what its
  request asked for, and the task or schedule it made; kept 24 hours. A message a key made
  carries the same value as its `messages.source_key`, so a repeat stores nothing.

Revision ID: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "request_key",
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("task_hash", sa.String(64), nullable=False, server_default=""),
        sa.Column("schedule_id", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("created_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index("ix_request_key_session", "request_key", ["session_id"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
