"""Several instances on one database: answers given on any instance, deliveries claimed.

- `prompt_answer`: the answer to a task's n-th prompt, whichever instance took it. Its key
  makes the first answer the only one: an answer given on one instance and the prompt's expiry
  (or another answer) on the instance running the task cannot both stand.
- `outbox.claimed_by` / `outbox.claimed_until`: the instance sending an entry, until when. An
  entry is sent only by the instance whose claim took (a conditional update), so two
  instances that both see it send it once; a claim left by an instance that died lapses.

Revision ID: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prompt_answer",
        sa.Column("task_hash", sa.String(64), primary_key=True),
        sa.Column("number", sa.Integer, primary_key=True),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("answer", sa.Text, nullable=False),  # JSON
        sa.Column("answered_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index("ix_prompt_answer_session", "prompt_answer", ["session_id"])
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("claimed_by", sa.String(140), nullable=False, server_default=""))
        batch.add_column(
            sa.Column("claimed_until", sa.BigInteger, nullable=False, server_default="0")
        )


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
