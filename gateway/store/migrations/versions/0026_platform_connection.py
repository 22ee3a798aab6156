"""Platform connections: the bot token of Telegram and of Discord, by reference.

- `platform_connection`: one row per platform an admin configured live (`telegram`,
  `discord`): where its bot token is (`env:NAME` or `file:NAME`, never a token), whether it is
  on, who changed it and when. A platform without a row takes its token from the environment
  (`AGENVOY_TELEGRAM_TOKEN`, `AGENVOY_DISCORD_TOKEN`), as before; every change is in the log
  of changes (`config_change`, kind `connection`).

Revision ID: 0026
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "platform_connection",
        sa.Column("platform", sa.String(20), primary_key=True),
        sa.Column("token", sa.String(140), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("changed_by", sa.String(200), nullable=False, server_default=""),
        sa.Column("changed_at", sa.BigInteger, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
