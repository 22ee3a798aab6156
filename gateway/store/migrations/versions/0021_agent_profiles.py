"""Agent profiles and their bindings.

- `agent_profile`: every version of every profile (`spec` a JSON object of its fields; the
  key is a reference, never a key), with who changed it, when, and what changed. A profile's
  current version is its highest; a rollback is a new version holding an older one's fields.
- `agent_binding`: a place or caller (`kind`, `key`: a Discord channel, a Telegram topic, an
  identity, a session prefix...) → a profile name; `switchable` lists the profiles a shared
  chat's admins may choose there with `/agent use`.
- `agent_config`: one row whose `version` goes up with every change of either table, so that
  each task asks one number to know whether what it holds is current.

Revision ID: 0021
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_KEY = 200  # an identity key, as elsewhere


def upgrade() -> None:
    op.create_table(
        "agent_profile",
        sa.Column("name", sa.String(40), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("changed_by", sa.String(_KEY), nullable=False, server_default=""),
        sa.Column("changed_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("change", sa.Text, nullable=False, server_default=""),
    )
    op.create_table(
        "agent_binding",
        sa.Column("kind", sa.String(40), primary_key=True),
        sa.Column("key", sa.String(_KEY), primary_key=True),
        sa.Column("profile", sa.String(40), nullable=False),
        sa.Column("switchable", sa.Text, nullable=False, server_default=""),
        sa.Column("bound_by", sa.String(_KEY), nullable=False, server_default=""),
        sa.Column("bound_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    config = op.create_table(
        "agent_config",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.bulk_insert(config, [{"id": 1, "version": 0}])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
