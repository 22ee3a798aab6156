"""The web console at `/ui`: pages for the people who run the bot (adapters/web/app.py)."""
