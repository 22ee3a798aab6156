"""Agents: what turns a message into a reply. `offline` needs no network."""
