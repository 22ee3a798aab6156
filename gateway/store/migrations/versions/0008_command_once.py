"""Gateway commands handled once per platform delivery.

- `command_once`: the `source_key` of each command a platform delivered (a Telegram update, a
  Discord message) and was answered. A command delivered again — after a crash, or to a second
  instance behind a load balancer — is not run again. Messages for the agent have the same
  guarantee through `messages.source_key`.

Revision ID: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "command_once",
        sa.Column("source_key", sa.String(200), primary_key=True),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("handled_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index("ix_command_once_session", "command_once", ["session_id"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
