"""agenvoy-gateway core: sessions, stores and the router. Knows nothing of any platform."""

__version__ = "0.1.0"
