"""What members asked the bot to remember about them.

- `member_memory`: one row per memory: the identity that asked (`telegram:41`), the text (at
  most 500 characters, checked by the gateway), when, the session it was asked in (`asked_in`:
  the memory is the member's and outlives it), and how
  (`command`: /remember; `tool`: the agent's `remember`, agreed to by the member). A member's
  memories are those of all their linked identities; the export and the erasure of their
  data include them.

Revision ID: 0024
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "member_memory",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("identity", sa.String(200), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("asked_in", sa.String(200), nullable=False, server_default=""),
        sa.Column("via", sa.String(16), nullable=False, server_default="command"),
    )
    op.create_index("ix_member_memory_identity", "member_memory", ["identity"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
