"""What each model call cost.

- `usage.cost`: US dollars by the price table (`AGENVOY_PRICES`) in force when the row was
  written, so a later change of prices leaves past spend as it was; NULL for rows written
  without a price table (and all rows from before).

Revision ID: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("usage", sa.Column("cost", sa.Double(), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
