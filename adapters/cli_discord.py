"""`agenvoy discord invite`: the link that adds the bot to a server, asked of Discord with the
configured token. Light to import (`agenvoy --help` loads it): discord.py and the HTTP client
come in only when the command runs."""

from __future__ import annotations

import asyncio

import typer

from gateway.cli_support import fail, load_settings

discord_app = typer.Typer(help="The Discord bot: its invite link.", no_args_is_help=True)


@discord_app.command()
def invite() -> None:
    """Print the link that adds the bot to a server, with the scopes and permissions it uses."""
    from adapters.discord.invite import InviteUnavailable, application_id, invite_url

    settings = load_settings()
    token = settings.discord_token.get_secret_value() if settings.discord_token else ""
    if not token:
        fail("AGENVOY_DISCORD_TOKEN is not set: the invite link is the bot's application's", 2)
    try:
        app_id = asyncio.run(application_id(settings.discord_api_url, token))
    except InviteUnavailable as exc:
        fail(f"no invite link: {exc}", 1)
    typer.echo(invite_url(app_id))
