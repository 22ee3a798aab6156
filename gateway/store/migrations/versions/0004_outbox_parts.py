"""Outbox entries remember how many parts of a message went out.

A reply longer than the platform's limit is sent as several messages. Knowing how many were
already accepted lets a delivery retried after a restart go on from the next part instead of
sending the first ones again.

Revision ID: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("parts_sent", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
