"""The four settings a client of a running gateway needs (where its home is, where its API
listens, and the shared token), read the way `Settings` reads them but without pydantic.

`agenvoy send`, `pending`, `approve` and `deny` are short-lived processes whose start-up is
most of what a user waits for; building the full settings model costs them more than the
request itself. The defaults live here and `Settings` takes them from here, so the two readers
cannot drift apart on them; tests/test_client_settings.py holds them to the same answers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ENV_PREFIX: Final = "agenvoy_"
ENV_FILE: Final = ".env"
DEFAULT_HOME: Final = "~/.config/agenvoy"
DEFAULT_HTTP_HOST: Final = "127.0.0.1"
DEFAULT_HTTP_PORT: Final = 17989
# Where a running gateway writes the port its API listens on, in its store directory: with
# AGENVOY_HTTP_PORT=0 it takes a free one, and its clients find it there.
PORT_FILE: Final = "http.port"


class InvalidClientSettings(ValueError):
    """A setting the client needs has a value it cannot use."""


@dataclass(frozen=True, slots=True)
class ClientSettings:
    home: Path
    http_host: str
    http_port: int
    api_token: str = ""

    def __post_init__(self) -> None:
        if self.http_port == 0:  # whichever port the running gateway took
            object.__setattr__(self, "http_port", read_bound_port(self.store_dir))

    @property
    def store_dir(self) -> Path:
        return self.home / ".store"

    @property
    def gateway_url(self) -> str:
        # A gateway bound to every interface is reached on loopback from the same machine.
        host = "127.0.0.1" if self.http_host in ("0.0.0.0", "::") else self.http_host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.http_port}"


def read_bound_port(store_dir: Path) -> int:
    """The port the gateway of this home listens on, as it wrote it; 0 if none did."""
    try:
        return int((store_dir / PORT_FILE).read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return 0


def read_client_settings(
    environ: Mapping[str, str] | None = None, env_file: Path | None = Path(ENV_FILE)
) -> ClientSettings:
    """The client settings from the environment over the `.env` file, as `Settings` reads
    them: names case-insensitive, the environment winning over the file."""
    values: dict[str, str] = {}
    if env_file is not None and env_file.is_file():
        # python-dotenv is what pydantic-settings parses the file with: same quoting rules.
        from dotenv import dotenv_values

        values.update(_ours(dotenv_values(env_file, encoding="utf-8")))
    values.update(_ours(os.environ if environ is None else environ))
    port_text = values.get("http_port", str(DEFAULT_HTTP_PORT))
    try:
        port = int(port_text.strip())
    except ValueError:
        raise InvalidClientSettings(
            f"AGENVOY_HTTP_PORT must be a whole number, not {port_text!r}"
        ) from None
    home = Path(values.get("home", DEFAULT_HOME)).expanduser().resolve()
    return ClientSettings(
        home=home,
        http_host=values.get("http_host", DEFAULT_HTTP_HOST),
        http_port=port,
        api_token=values.get("api_token", ""),
    )


def _ours(source: Mapping[str, str | None]) -> dict[str, str]:
    return {
        key.lower().removeprefix(ENV_PREFIX): value
        for key, value in source.items()
        if value is not None and key.lower().startswith(ENV_PREFIX)
    }
