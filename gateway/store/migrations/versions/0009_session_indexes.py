"""Every per-session table findable by session.

`outbox` and `file_history` had no index leading with `session_id`: deleting or renaming a
session (the reaper, a Telegram group that became a supergroup) scanned them whole.

Revision ID: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_outbox_session", "outbox", ["session_id"])
    op.create_index("ix_file_history_session", "file_history", ["session_id"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
