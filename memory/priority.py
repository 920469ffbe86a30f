"""Searches before indexing: a question never waits for the background indexers.

Both indexers (memory/history_index.py for the stored turns, memory/search.py's refresh of memory passages)
call :meth:`SearchFirst.wait_turn` before each small batch; a search (``history_search``, ``memory_search``)
runs inside :meth:`SearchFirst.searching`. While any search runs, no new batch starts, so the search's own
database reads and its question's embedding do not queue behind a backlog. A batch already running is not
interrupted (a few texts: the question is embedded beside it, on its own thread, see memory/embeddings.py).
An indexer waits at most :data:`MAX_WAIT` seconds at a time, so a steady stream of searches cannot starve it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

#: Longest an indexer waits for searches at once, in seconds: with chats asking back to back (bench/memory_load.py)
#: a longer wait let the backlog grow (the question has its own engine thread, so a batch beside it costs it
#: little on two cores).
MAX_WAIT = 1.0


class SearchFirst:
    """The count of searches running, and an event set when there is none."""

    def __init__(self) -> None:
        self.searches = 0
        self._idle: asyncio.Event | None = None

    def _event(self) -> asyncio.Event:
        if self._idle is None:
            self._idle = asyncio.Event()
            self._idle.set()
        return self._idle

    @contextlib.asynccontextmanager
    async def searching(self) -> AsyncIterator[None]:
        """Hold the indexers back while the block runs."""
        idle = self._event()
        self.searches += 1
        idle.clear()
        try:
            yield
        finally:
            self.searches -= 1
            if not self.searches:
                idle.set()

    async def wait_turn(self, limit: float = MAX_WAIT) -> None:
        """An indexer's turn: once no search runs (or after ``limit`` seconds)."""
        if self.searches:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit):
                    await self._event().wait()
