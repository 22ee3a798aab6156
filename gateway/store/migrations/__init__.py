"""Alembic migrations of the SQL archive; they run at start-up (see gateway.store.db)."""
