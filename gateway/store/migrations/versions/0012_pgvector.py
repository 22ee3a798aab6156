"""pgvector, where the PostgreSQL server has it: the embeddings' vectors in a column of the
`vector` type, so that semantic recall is one SQL query every instance shares.

- `embedding_pgvector`: the vector of an `embedding` row (deleted with it). Made only on
  PostgreSQL when the `vector` extension is available and can be created (or is already);
  everywhere else nothing changes and recall uses the in-process index. The check is made
  once, here: pgvector installed after a database passed this revision is not taken up.

Revision ID: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    available = bind.execute(
        sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    ).first()
    if available is None:
        return
    # Creating an extension may need rights the gateway's role lacks: then recall goes on
    # without it rather than the gateway failing to start.
    savepoint = bind.begin_nested()
    try:
        bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
        bind.execute(
            sa.text(
                "CREATE TABLE IF NOT EXISTS embedding_pgvector ("
                " id INTEGER PRIMARY KEY REFERENCES embedding(id) ON DELETE CASCADE,"
                " vec vector NOT NULL)"
            )
        )
        savepoint.commit()
    except sa.exc.DBAPIError:
        savepoint.rollback()


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
