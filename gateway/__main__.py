"""`python -m gateway …` is the `agenvoy` command (used to start a gateway in the background)."""

from gateway.cli import app

app()
