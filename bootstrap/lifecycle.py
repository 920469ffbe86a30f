"""Parts started in order and stopped in the reverse order, each start paired with its stop.

In the spirit of nonebot2's ``on_startup``/``on_shutdown`` and PTB's ``initialize``/``shutdown``: the
runner (bootstrap/runner.py) registers a part as it starts it, so what started is exactly what stops, last
first. A stop that fails is logged and the others still run.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

Step = Callable[[], Awaitable[object] | object]


class Lifecycle:
    """Ordered start/stop pairs."""

    def __init__(self) -> None:
        self._stops: list[tuple[str, Step]] = []

    @property
    def started(self) -> list[str]:
        """The names of the parts started so far, in start order."""
        return [name for name, _ in self._stops]

    async def start(self, name: str, start: Step | None, stop: Step | None) -> None:
        """Run ``start`` (if any); once it returned, ``stop`` runs at :meth:`stop`."""
        if start is not None:
            await _call(start)
        if stop is not None:
            self._stops.append((name, stop))

    async def stop(self) -> None:
        """Stop every started part, the last started first."""
        while self._stops:
            name, stop = self._stops.pop()
            try:
                await _call(stop)
            except Exception:  # noqa: BLE001 - one part failing to stop must not keep the others running
                logger.exception("%s failed to stop", name)


async def _call(step: Step) -> None:
    result = step()
    if inspect.isawaitable(result):
        await result
