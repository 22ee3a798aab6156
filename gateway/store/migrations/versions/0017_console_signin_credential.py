"""Which credential a console sign-in was made with.

- `console_signin.credential`: the SHA-256 of the token a viewer signed in with (for the local
  credential, of that credential). A sign-in stands only while the gateway still accepts that
  very credential, so a token revoked and issued again under the same name ends the sign-ins
  the old one made.

Revision ID: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "console_signin",
        sa.Column("credential", sa.String(64), nullable=False, server_default=""),
    )


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
