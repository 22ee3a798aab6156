"""Usage rows name the task they were spent for.

- `usage.task_hash`: the task a model call belonged to; a subagent's calls name the parent
  task that started it (their `session_id` is the subagent's own `temp-*` session). Empty for
  rows written before.

Revision ID: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.add_column(sa.Column("task_hash", sa.String(32), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("task_hash")
