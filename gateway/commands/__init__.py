"""Gateway commands (`/help`, `/status`, …): one registry feeds every front-end."""
