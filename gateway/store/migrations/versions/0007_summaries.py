"""Rolling summaries in the archive, so that any instance taking a session over goes on from
where the last one left it.

- `session_summary`: a session's summary text, the id of the last message it covers (the
  cursor), and the id of the last message before its latest /reset (the window starts after
  it). One row per session in practice; a session renamed into another that had one keeps
  both, and the newest counts.

Revision ID: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_summary",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("cursor", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("reset_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("updated_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index("ix_session_summary_session", "session_summary", ["session_id"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
