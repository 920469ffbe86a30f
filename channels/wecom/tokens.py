"""WeCom's access token, shared by every process through the database and fetched by one of them at a time.

A token lasts two hours (``expires_in``) and WeCom counts every ``gettoken`` call, so it is fetched once and kept
with its expiry in ``shared_values`` (the store's table; it reaches the channel through its constructor, so the
channel does not import the store). A process that needs a new token claims the refresh; the others wait a
moment and read what it stored. A token the API rejects (errcode 40014 or 42001) is replaced the same way, once.
Without a database (a channel built alone) the token is kept in memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

logger = logging.getLogger(__name__)

#: a token with less than this many seconds left is fetched again
MARGIN_S = 300.0
#: how long one process may take to fetch a token before another may try
LEASE_S = 30.0
#: how often a waiting process looks for the token another is fetching
POLL_S = 0.2


class Shared(Protocol):
    """What the token cache needs of ``store.shared_values.SharedValues``."""

    async def get(self, name: str) -> Any: ...
    async def claim(self, name: str, *, margin: float, lease: float, replacing: str | None = None) -> bool: ...
    async def put(self, name: str, value: str, expires_at: datetime | None) -> None: ...
    async def release(self, name: str) -> None: ...


class _Value:
    def __init__(self, value: str, expires_at: datetime | None) -> None:
        self.value, self.expires_at = value, expires_at

    def fresh(self, margin: float = 0.0) -> bool:
        return bool(self.value) and (self.expires_at is None
                                     or self.expires_at > datetime.now(UTC) + timedelta(seconds=margin))


class MemoryShared:
    """:class:`Shared` in this process only (no database)."""

    def __init__(self) -> None:
        self._values: dict[str, _Value] = {}
        self._claimed: set[str] = set()

    async def get(self, name: str) -> Any:
        return self._values.get(name)

    async def claim(self, name: str, *, margin: float, lease: float, replacing: str | None = None) -> bool:
        value = self._values.get(name)
        stale = value is None or not value.fresh(margin) or (replacing is not None and value.value == replacing)
        if name in self._claimed or not stale:
            return False
        self._claimed.add(name)
        return True

    async def put(self, name: str, value: str, expires_at: datetime | None) -> None:
        self._values[name] = _Value(value, expires_at)
        self._claimed.discard(name)

    async def release(self, name: str) -> None:
        self._claimed.discard(name)


#: fetches a new token: (token, seconds it lasts)
Fetch = Callable[[], Awaitable[tuple[str, int]]]


class TokenCache:
    """One app's access token (see the module docstring)."""

    def __init__(self, shared: Shared, name: str, fetch: Fetch) -> None:
        self.shared = shared
        self.name = name
        self.fetch = fetch
        #: tokens this process fetched (the tests count them across processes in the fake API instead)
        self.fetched = 0

    async def get(self, rejected: str | None = None) -> str:
        """A token good for a while; ``rejected``: the API refused this one, get another (once, across
        processes: if another process replaced it already, that one is used)."""
        deadline = asyncio.get_running_loop().time() + LEASE_S + 5
        while True:
            found = await self.shared.get(self.name)
            if found is not None and found.fresh(MARGIN_S) and found.value != rejected:
                return found.value
            if await self.shared.claim(self.name, margin=MARGIN_S, lease=LEASE_S, replacing=rejected):
                try:
                    token, expires_in = await self.fetch()
                except BaseException:
                    await self.shared.release(self.name)
                    raise
                self.fetched += 1
                await self.shared.put(self.name, token, datetime.now(UTC) + timedelta(seconds=expires_in))
                logger.info("wecom: fetched a new access token (good for %d s)", expires_in)
                return token
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError("wecom: no access token: another process holds the refresh and stored none")
            await asyncio.sleep(POLL_S)
