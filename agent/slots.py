"""How many model requests may be in flight at once to one endpoint (``model_max_parallel``, DESIGN §2.4).

Local servers serve one request at a time by default (llama.cpp's server with one slot, llama-cpp-python,
Ollama with one parallel request, LM Studio), and some cut a running answer when another request arrives
(llama-cpp-python's ``interrupt_requests`` is on by default). So with ``model_max_parallel`` 0 an endpoint on
a loopback or private address gets one slot, and a summary waits for it instead of cutting a reply. A reply
waiting for a slot goes before waiting background calls (summaries), and while a turn is preparing its request
(:meth:`ModelSlots.reply_coming`: the trim that starts a summary comes just before the reply's call) a free slot
is kept for it, so the summary a trim starts never delays the reply that caused it.

:func:`urgent` is a context variable, one of the two the project keeps (the other is ``core/usage.py``'s usage
scope), because it is cross-cutting: the slots are taken inside the model client, below every caller (a reply,
its flush, a summary, a media call), and the mark must reach them through code that knows no turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import ipaddress
import itertools
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from urllib.parse import urlsplit

#: True while the running task makes a model call someone is waiting for (a reply): see :func:`urgent`.
_URGENT: ContextVar[bool] = ContextVar("model_call_urgent", default=False)


@contextlib.contextmanager
def urgent() -> Iterator[None]:
    """Mark the model calls made inside as a reply's: they take a free slot before background calls.

    Ambient on purpose (a context variable): it is cross-cutting, read by the request slots deep in the model
    client for any caller, not one of a turn's arguments (those travel as ``agent.turn.AgentTurn``)."""
    token = _URGENT.set(True)
    try:
        yield
    finally:
        _URGENT.reset(token)


def is_local_endpoint(base_url: str) -> bool:
    """True for an endpoint on a loopback or private address (``localhost``, 127.0.0.1, 10.x, 192.168.x, ::1,
    a ``.local`` name). Other host names are not resolved: they count as remote."""
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "localhost" or host.endswith((".localhost", ".local")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def automatic_parallel(base_url: str, configured: int = 0) -> int | None:
    """The slots for ``base_url``: ``configured`` when positive, else 1 for a local endpoint and None
    (unlimited) otherwise."""
    if configured > 0:
        return configured
    return 1 if is_local_endpoint(base_url) else None


class ModelSlots:
    """At most ``limit`` holders at once; waiting urgent calls are served before the others, each in order."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.busy = 0
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        #: turns between the start of their model phase and its end: background calls wait for them
        self.preparing = 0

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot now."""
        return sum(1 for *_, future in self._waiting if not future.done())

    @contextlib.contextmanager
    def reply_coming(self) -> Iterator[None]:
        """A turn is preparing (and then making) its reply's calls: background calls take no free slot meanwhile."""
        self.preparing += 1
        try:
            yield
        finally:
            self.preparing -= 1
            self._hand_free()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one slot for the body; wait for it when all are taken (or kept for a coming reply)."""
        if self.busy < self.limit and not self.waiting and (_URGENT.get() or not self.preparing):
            self.busy += 1
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (0 if _URGENT.get() else 1, next(self._order), future))
            self._hand_free()
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():  # the slot was handed over as we were cancelled
                    self._release()
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        """Hand the slot to the first waiter that may have it, or free it."""
        self.busy -= 1
        self._hand_free()

    def _hand_free(self) -> None:
        """Give free slots to waiters: urgent ones first; background ones only when no reply is coming."""
        while self.busy < self.limit and self._waiting:
            rank, _, future = self._waiting[0]
            if future.done():
                heapq.heappop(self._waiting)
                continue
            if rank > 0 and self.preparing:
                return
            heapq.heappop(self._waiting)
            future.set_result(None)
            self.busy += 1
