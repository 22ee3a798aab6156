"""Durable session storage: per-session files, the SQL archive and the KV store."""
