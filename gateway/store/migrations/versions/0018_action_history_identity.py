"""Whom each finished task acted for.

- `action_history.identity`: the identity key (`platform:sender id`) a task acted for — its
  requester, a schedule's creator, a subagent's parent's requester; "" for runs recorded
  before it was kept. Indexed with `session_id` so a member's runs are found per session.

Revision ID: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_KEY = 200  # an identity key, as `usage.identity`


def upgrade() -> None:
    op.add_column(
        "action_history",
        sa.Column("identity", sa.String(_KEY), nullable=False, server_default=""),
    )
    op.create_index("ix_action_history_identity", "action_history", ["identity", "session_id"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
