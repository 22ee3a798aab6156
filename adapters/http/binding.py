"""Never the network without a token: `start_http` refuses to listen beyond loopback unless
AGENVOY_API_TOKEN is set or a token was issued with `agenvoy token add`.
"""

from __future__ import annotations

import functools
import ipaddress

from gateway.credentials import Credentials
from gateway.settings import Settings


class InsecureBinding(RuntimeError):
    """Listening beyond loopback without an API token would open the API to the network."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"refusing to serve the HTTP API on {host!r} without a token: set AGENVOY_API_TOKEN "
            "(or issue one with `agenvoy token add NAME`) or bind to 127.0.0.1"
        )
        self.host = host


_LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")
_LOOPBACK_V6 = ipaddress.IPv6Address("::1")


# Asked for every request's Host header, nearly always the same few names: parsing an address
# each time showed in profiles. The cache is small and bounded against hostile headers.
@functools.lru_cache(maxsize=64)
def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost`; anything else (including "" = every interface) is not."""
    name = host.strip().lower()
    if name == "localhost":
        return True
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return address in _LOOPBACK_V4
    return address == _LOOPBACK_V6


def api_token(settings: Settings) -> str:
    """The configured token; an empty AGENVOY_API_TOKEN counts as none."""
    return settings.api_token.get_secret_value() if settings.api_token is not None else ""


def check_binding(host: str, credentials: Credentials) -> None:
    """InsecureBinding for a host other than loopback while no token is configured or issued."""
    if not is_loopback(host) and not credentials.required:
        raise InsecureBinding(host)
