"""Wrong link codes counted in the archive.

- `link_attempt`: per identity, the times (Unix ms, comma-separated) of the wrong link codes it
  entered within the last window, so that several instances count one identity's guesses
  together instead of allowing the limit each.

Revision ID: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_KEY = 200  # an identity key, as `link_code.identity`


def upgrade() -> None:
    op.create_table(
        "link_attempt",
        sa.Column("identity", sa.String(_KEY), primary_key=True),
        sa.Column("misses", sa.Text, nullable=False, server_default=""),
    )


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
