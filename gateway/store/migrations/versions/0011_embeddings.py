"""Semantic recall: an embedding per archived message and per rolling-summary version.

- `embedding`: the vector (float32 bytes) of one message or summary of a session, with the
  model that made it and its dimension; one per (session, kind, message or summary row, model), so a
  message embedded twice (two instances, a reindex racing the background job) is stored once.
- `embedding_cursor`: per session (the newest row counts, as with summaries), the last
  message and summary embedded, the model, and an epoch that changes when the session's
  embeddings are dropped.

Revision ID: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "embedding",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False, server_default="message"),
        sa.Column("message_id", sa.BigInteger, nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("dim", sa.Integer, nullable=False),
        sa.Column("vector", sa.LargeBinary, nullable=False),
        sa.Column("text", sa.Text, nullable=False, server_default=""),
        sa.UniqueConstraint("session_id", "kind", "message_id", "model", name="ux_embedding_item"),
    )
    # An index is loaded, then kept up to date, by a session's rows after the last one it has.
    op.create_index("ix_embedding_session", "embedding", ["session_id", "model", "id"])
    op.create_table(
        "embedding_cursor",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(140), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("message_cursor", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("summary_cursor", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("epoch", sa.String(32), nullable=False, server_default=""),
    )
    op.create_index("ix_embedding_cursor_session", "embedding_cursor", ["session_id"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
