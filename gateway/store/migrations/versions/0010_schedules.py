"""Scheduled prompts per session.

- `schedule`: a prompt run as a task of its session at each due time, with the spec that says
  when (an interval or a cron expression in a time zone), what to do with a due time missed
  while no gateway ran, who made it, and the next due time. A firing is taken in with the
  message key `schedule:<id>:<created_at>:<due time>`, so a crash between storing the task and
  moving `next_due_at` on stores nothing the second time.

Revision ID: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedule",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("spec", sa.String(200), nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False, server_default="UTC"),
        sa.Column("misfire", sa.String(8), nullable=False, server_default="once"),
        sa.Column("created_by_id", sa.String(200), nullable=False, server_default=""),
        sa.Column("created_by_name", sa.String(200), nullable=False, server_default=""),
        sa.Column("created_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("next_due_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("last_fired_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index("ix_schedule_session", "schedule", ["session_id"])
    # The firing job asks for what is due every few seconds.
    op.create_index("ix_schedule_next_due", "schedule", ["next_due_at"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
