"""Every change of live configuration that is not a profile version: who, when, what.

- `config_change`: one row per change of a quota override or an agent binding (`kind`), of
  one `subject` (the identity or chat; the binding's `kind:key`), holding the value before and
  after as JSON ("" for none). A change is rolled back by making a new one that puts `before`
  back, so the table only grows and says the whole story. Profiles keep their own versions
  (`agent_profile`).

Revision ID: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_KEY = 200  # an identity key, as elsewhere


def upgrade() -> None:
    op.create_table(
        "config_change",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("subject", sa.String(250), nullable=False),
        sa.Column("before", sa.Text, nullable=False, server_default=""),
        sa.Column("after", sa.Text, nullable=False, server_default=""),
        sa.Column("changed_by", sa.String(_KEY), nullable=False, server_default=""),
        sa.Column("changed_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("reverts", sa.Integer, nullable=True),
    )
    op.create_index("ix_config_change_subject", "config_change", ["kind", "subject", "id"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
