"""Who owns what: identities and their links, session owners and shares, bans, quotas, and
the console's sign-ins.

- `session.owner`: the identity key (`platform:sender id`) that made a private session; ""
  for a shared chat (`dc-*`, `tg-*`) and for sessions made before owners were kept.
- `session_share`: the identities an owner shared a session with, read-only or read-write.
- `messages.sender_key` and `usage.identity`: who wrote a message and whom a model call was
  spent for, so that a member's budget, export and erasure find their rows.
- `identity_link`: identities a person joined into one (`person` is the identity they were
  joined to); `link_code`: the one-time codes that join them, kept hashed.
- `schedule.suspended_at` / `suspended_reason`: a schedule that no longer fires because the
  identity it acts for was revoked or banned.
- `ban`: a member kept out of one chat (`scope` is its session id) or of the whole gateway
  (`scope` "*").
- `quota`: an identity's or a chat's own limits, over the defaults of the settings (JSON).
- `console_signin`: the console's server-side sign-ins, known by the hash of their cookie.

Revision ID: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_KEY = 200  # an identity key, as `messages.source_key`


def upgrade() -> None:
    op.add_column("session", sa.Column("owner", sa.String(_KEY), nullable=False, server_default=""))
    op.create_index("ix_session_owner", "session", ["owner"])
    op.add_column(
        "messages", sa.Column("sender_key", sa.String(_KEY), nullable=False, server_default="")
    )
    op.create_index("ix_messages_sender_key", "messages", ["sender_key", "session_id"])
    op.add_column(
        "usage", sa.Column("identity", sa.String(_KEY), nullable=False, server_default="")
    )
    op.create_index("ix_usage_identity", "usage", ["identity", "send_at"])
    op.add_column(
        "schedule",
        sa.Column("suspended_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.add_column(
        "schedule",
        sa.Column("suspended_reason", sa.String(_KEY), nullable=False, server_default=""),
    )
    op.create_index("ix_schedule_created_by", "schedule", ["created_by_id"])
    op.create_table(
        "session_share",
        sa.Column("session_id", sa.String(140), primary_key=True),
        sa.Column("identity", sa.String(_KEY), primary_key=True),
        sa.Column("mode", sa.String(8), nullable=False),  # "read" | "write"
        sa.Column("shared_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index("ix_session_share_identity", "session_share", ["identity"])
    op.create_table(
        "identity_link",
        sa.Column("identity", sa.String(_KEY), primary_key=True),
        sa.Column("person", sa.String(_KEY), nullable=False),
        sa.Column("linked_by", sa.String(_KEY), nullable=False, server_default=""),
        sa.Column("linked_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index("ix_identity_link_person", "identity_link", ["person"])
    op.create_table(
        "link_code",
        sa.Column("code_hash", sa.String(64), primary_key=True),
        sa.Column("identity", sa.String(_KEY), nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "ban",
        sa.Column("scope", sa.String(140), primary_key=True),
        sa.Column("identity", sa.String(_KEY), primary_key=True),
        sa.Column("banned_by", sa.String(_KEY), nullable=False, server_default=""),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_table(
        "quota",
        sa.Column("subject", sa.String(_KEY), primary_key=True),  # identity key or session id
        sa.Column("limits", sa.Text, nullable=False, server_default="{}"),
        sa.Column("updated_by", sa.String(_KEY), nullable=False, server_default=""),
        sa.Column("updated_at", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_table(
        "console_signin",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("identity", sa.String(_KEY), nullable=False),
        sa.Column("name", sa.String(_KEY), nullable=False, server_default=""),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_console_signin_identity", "console_signin", ["identity"])


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
