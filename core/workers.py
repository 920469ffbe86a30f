"""Per-key FIFO workers: one task per key, created on demand, dropped when the key's queue is empty.

The dispatcher runs each session's messages through one of these, and the summariser each session's
summary jobs. Items of one key run one at a time, in submission order; different keys run concurrently,
at most ``concurrency`` at once when a bound is given. This lives in ``core/`` because both
``dispatcher/`` and ``memory/`` use it, and ``memory/`` must not import ``dispatcher/``.

Example::

    async def handle(key, item):
        ...

    workers = KeyedWorkers(handle, concurrency=4, name="summary")
    workers.submit("telegram:1", job)
    await workers.wait_idle()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class KeyedWorkers(Generic[T]):
    """One FIFO worker task per key, with an optional bound on how many items run at once.

    ``handler(key, item)`` runs each item. An exception it raises is logged and the key's next item runs;
    a handler that wants its own error path catches its exceptions itself. With ``hold_slot`` (the default)
    each item runs inside a concurrency slot; without it, the handler takes :meth:`slot` itself around
    the part of its work that the bound is meant for.
    """

    def __init__(self, handler: Callable[[Hashable, T], Awaitable[None]], *, concurrency: int | None = None,
                 hold_slot: bool = True, name: str = "worker") -> None:
        self._handler = handler
        self._slots = asyncio.Semaphore(concurrency) if concurrency else None
        self._hold_slot = hold_slot
        self.name = name
        self._queues: dict[Hashable, deque[T]] = {}
        self._tasks: dict[Hashable, asyncio.Task] = {}

    # --- queueing ----------------------------------------------------------------------------
    def submit(self, key: Hashable, item: T) -> None:
        """Queue ``item`` behind the key's earlier items; start the key's worker if it has none."""
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append(item)
        if key not in self._tasks:
            self._tasks[key] = asyncio.create_task(self._work(key, queue), name=f"{self.name}:{key}")

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one concurrency slot (no bound: returns at once)."""
        if self._slots is None:
            yield
            return
        async with self._slots:
            yield

    # --- state -------------------------------------------------------------------------------
    def busy(self, key: Hashable | None = None) -> bool:
        """True while the key (or any key) has queued or running items."""
        return bool(self._queues) if key is None else key in self._queues

    def pending(self, key: Hashable | None = None) -> int:
        """Items queued or running, for the key or for every key."""
        if key is not None:
            return len(self._queues.get(key, ()))
        return sum(len(q) for q in self._queues.values())

    def items(self, key: Hashable) -> list[T]:
        """The key's running item (first) and queued items, in order."""
        return list(self._queues.get(key, ()))

    def keys(self) -> list[Hashable]:
        """The keys with queued or running items."""
        return list(self._queues)

    def __len__(self) -> int:
        """The number of keys with a worker."""
        return len(self._tasks)

    # --- the worker --------------------------------------------------------------------------
    async def _work(self, key: Hashable, queue: deque[T]) -> None:
        try:
            while queue:
                item = queue[0]  # stays queued while it runs, so drain() reports it unfinished
                try:
                    if self._hold_slot and self._slots is not None:
                        async with self._slots:
                            await self._handler(key, item)
                    else:
                        await self._handler(key, item)
                except Exception:  # noqa: BLE001 - one failing item must not stop its key's queue
                    logger.exception("%s %s: an item failed", self.name, key)
                queue.popleft()
        finally:
            # No await between the last emptiness check and here: a later submit() starts a new worker.
            if self._queues.get(key) is queue:
                del self._queues[key]
                del self._tasks[key]

    # --- waiting and shutdown ----------------------------------------------------------------
    async def wait_idle(self) -> None:
        """Wait until no key has queued or running items (items submitted meanwhile included). Cancelling the
        wait leaves the items running: ``asyncio.wait``, not ``gather``, whose cancellation cancels every
        worker it waits on (a Ctrl-C in the terminal cut the reply being written so, issue 40)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))

    async def drain(self, grace: float) -> dict[Hashable, list[T]]:
        """Wait up to ``grace`` s for every queued item; cancel the rest and return them by key.

        The returned items are those that did not finish: each key's running item first, then its queued
        ones. An empty dict means everything finished.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self._tasks:
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.wait(list(self._tasks.values()), timeout=left)
        if not self._tasks:
            return {}
        unfinished = {key: list(queue) for key, queue in self._queues.items()}
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for key, task in list(self._tasks.items()):  # cancelled before it ever ran: its finally did not run
            if task in tasks:
                del self._tasks[key]
                self._queues.pop(key, None)
        return unfinished
