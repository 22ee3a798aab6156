"""One file_history row per file per task: the first version that task saw.

Databases written before this revision may hold several rows for the same file in one task;
they are deleted, keeping the earliest, before the partial unique index is created. Rows with
an empty task_id are left as they are.

Revision ID: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "DELETE FROM file_history WHERE task_id != '' AND id NOT IN ("
        "SELECT MIN(id) FROM file_history WHERE task_id != '' "
        "GROUP BY dir, name, task_id, session_id)"
    )
    op.create_index(
        "ux_file_history_task",
        "file_history",
        ["dir", "name", "task_id", "session_id"],
        unique=True,
        sqlite_where=sa.text("task_id != ''"),
        postgresql_where=sa.text("task_id != ''"),
    )


def downgrade() -> None:
    raise NotImplementedError("the archive is never downgraded")
