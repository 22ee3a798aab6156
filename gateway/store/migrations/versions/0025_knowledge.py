"""Knowledge: documents admins attach to a profile, a place or a session, in passages.

- `knowledge_document`: one row per document attached to one target (`profile:NAME`, a
  binding's target such as `discord-channel:901` or `telegram-chat:-100`, or `session:SID`):
  its title, where it came from (a file name or the URL fetched once), media type, the
  SHA-256 of its bytes (one document is attached to one target once), size, how many
  passages, the embedding model they were embedded with, who attached it and when.
- `knowledge_chunk`: its passages in order, each with the section a citation names ("page 3",
  "Rules > Voice channels") and its embedding (float32 bytes), removed with the document.

Revision ID: 0025
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "knowledge_document",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("target", sa.String(200), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("source", sa.String(2000), nullable=False),
        sa.Column("media_type", sa.String(40), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("chunks", sa.Integer, nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("added_by", sa.String(200), nullable=False, server_default=""),
        sa.Column("added_at", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("target", "sha256", name="uq_knowledge_document_target_sha256"),
    )
    op.create_index("ix_knowledge_document_target", "knowledge_document", ["target"])
    op.create_table(
        "knowledge_chunk",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("document_id", sa.Integer, nullable=False),
        sa.Column("ordinal", sa.Integer, nullable=False),
        sa.Column("section", sa.String(300), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("vector", sa.LargeBinary, nullable=False),
    )
    op.create_index("ix_knowledge_chunk_document_id", "knowledge_chunk", ["document_id"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
