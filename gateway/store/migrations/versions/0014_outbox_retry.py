"""Outbox entries keep their retry schedule.

- `outbox.next_attempt_at`: when the next attempt at a failed delivery is due (Unix ms).
- `outbox.expires_at`: when a delivery that keeps failing stops being tried and is marked
  failed (Unix ms). Both 0 until the entry's first failed attempt.

Revision ID: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(
            sa.Column("next_attempt_at", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("expires_at", sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("expires_at")
        batch.drop_column("next_attempt_at")
