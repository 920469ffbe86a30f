"""HTTP plumbing for the Telegram channel's aiohttp requests (channels/telegram/request.py).

TLS is verified against certifi's bundle where it is installed, as the httpx-based clients do, and
``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``NO_PROXY`` are honoured, looked up once per host: aiohttp's own
``trust_env`` reads the environment and ~/.netrc on every request. The model client does not use this
module: the openai SDK brings its own transport, TLS and proxy handling.
"""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass


def ssl_context() -> ssl.SSLContext:
    """Verify against certifi's bundle when it is installed, else the system's."""
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


class EnvProxies:
    """The proxy for a URL from HTTPS_PROXY / HTTP_PROXY / NO_PROXY, looked up once per scheme and host."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], str | None] = {}

    def clear(self) -> None:
        """Read the environment again at the next lookup."""
        self._cache.clear()

    def for_url(self, url: str) -> str | None:
        """The proxy URL to use for ``url``, or None for a direct connection."""
        parts = urlsplit(url)
        key = (parts.scheme, parts.hostname or "")
        if key not in self._cache:
            proxy = getproxies().get(parts.scheme)
            if proxy and parts.hostname and proxy_bypass(parts.hostname):
                proxy = None
            self._cache[key] = proxy
        return self._cache[key]
