"""Per-user API tokens in the archive, so that every instance accepts the same ones.

- `api_token`: one row per token issued (`agenvoy token add`, `POST /v1/tokens`): the name it
  stands for (`http:NAME`), its display name, the SHA-256 of the token (never the token), who
  issued it and when. Revoking deletes the row. Each issue and revocation is also a line of
  `config_change` (kind `token`), whose newest number for that kind is what every instance
  polls to see a change. A home's old `api_tokens.json` is imported at the next start.
- an index on `config_change (kind, id)` for that poll.

Revision ID: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_token",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("display", sa.String(64), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("issued_by", sa.String(200), nullable=False, server_default=""),
        sa.Column("issued_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index("ix_config_change_kind", "config_change", ["kind", "id"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
