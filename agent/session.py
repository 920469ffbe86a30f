"""A session's context and its handle, :class:`SessionState`: the one place that writes it, in the store and in
memory together (``tests/agent/test_session_owner.py``; agent/sessions.py, which loads, restores, compacts and
evicts the contexts, is the other module it allows).

A restored context (agent/sessions.py, DESIGN §4) may wait for the summary of the turns it skipped: the first
reply then waits (``SessionState.ready``, up to :data:`FIRST_REPLY_WAIT_SECONDS`) for the session's summary
jobs, so it sees what every turn after the boundary said.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.records import SessionInfo, StoredMessage
from core.turns import CtxMessage, Turn, group_turns
from store.media import rewrite_message
from store.store import Store

logger = logging.getLogger(__name__)


class DropSink(Protocol):
    """Receives turns that left the context (the summariser)."""

    async def submit(self, session_id: str, reason: str, from_seq: int, through_seq: int) -> None:
        """Take the messages ``from_seq..through_seq`` of a session for summarising (journalled, then run
        in the background: this must return quickly)."""
        ...

    def note_cleared(self, session_id: str) -> None:
        """The session's context was just cleared: summaries queued before now go to memory only."""
        ...

    def settled(self, session_id: str) -> asyncio.Future | None:
        """Done when the session's jobs queued so far have finished; None when none is queued."""
        ...


#: The first reply after a restart or an eviction waits this long for the summary of skipped turns.
FIRST_REPLY_WAIT_SECONDS = 15.0


@dataclass(eq=False)
class SessionState:
    """One session's context, and the handle through which it changes.

    The session manager (agent/sessions.py) hands it out; its async methods write the store and the live
    context together, in this module and nowhere else but the manager's (``tests/agent/test_session_owner.py``
    fails when another module assigns a field, calls a live-only writer, or calls one of the store's session
    writers): add a message, the user's (with its journal link) or the answer (with the outbox's copy), resume
    at a stored user message, apply a prepared context (moving the boundary past dropped turns), swap a photo
    for its words, clear. Those that change ``messages`` are called by the holder of ``lock`` (the session's
    worker during its turn, or the manager's own ``clear``, ``compact``, ``note``, ``erase``). The summariser's
    changes come through ``LiveSessions`` (agent/sessions.py).
    """

    info: SessionInfo
    messages: list[CtxMessage]
    context_start_seq: int
    #: where the context is stored (the manager's store)
    store: Store = field(repr=False)
    summary: str | None = None
    summary_turns: int = 0
    summarized_through_seq: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: during a group turn: the group's background lines shown with the request, never stored as a turn
    background: list[str] = field(default_factory=list)
    last_used: float = field(default_factory=time.monotonic)
    #: set by a restore: done when the session's summary jobs queued at load have finished; the next
    #: turn waits for it (:meth:`wait_ready`) so the first reply sees every turn after the boundary
    ready: asyncio.Future | None = None

    async def wait_ready(self, wait: float = FIRST_REPLY_WAIT_SECONDS) -> bool:
        """Wait up to ``wait`` s for the summaries a restore queued; True if none is missing (once only)."""
        ready, self.ready = self.ready, None
        if ready is None or ready.done():
            return True
        started = time.monotonic()
        try:
            async with asyncio.timeout(wait):  # not wait_for: it can swallow the turn's cancel (a stop)
                await asyncio.shield(ready)
        except TimeoutError:
            logger.warning("session %s: the summary of the restored history is not ready after %.0f s; "
                           "answering without it", self.session_id, wait)
            return False
        logger.info("session %s: waited %.1f s for the summary of the restored history", self.session_id,
                    time.monotonic() - started)
        return True

    @property
    def session_id(self) -> str:
        """The session id."""
        return self.info.session_id

    def turns(self) -> list[Turn]:
        """The context grouped into turns."""
        return group_turns(self.messages)

    # --- the handle: store and live context together ------------------------------------------
    async def add(self, message: dict[str, Any]) -> int:
        """Store ``message`` (an assistant or tool message, an answer without a journal row) and put it at the
        end of the context; its seq."""
        (seq,) = await self.store.sessions.append(self.session_id, [message])
        self._append(seq, message)
        return seq

    async def add_user(self, message: dict[str, Any], inbox_id: int | None = None) -> int:
        """Store the turn's user message, linked to its journal row ``inbox_id`` when it has one, before any
        model call, and put it in the context; its seq."""
        if inbox_id is None:
            return await self.add(message)
        seq = await self.store.sessions.append_user(self.session_id, message, inbox_id)
        self._append(seq, message)
        return seq

    async def add_answer(self, message: dict[str, Any], inbox_id: int, reply: str) -> int:
        """Store the turn's final answer and the outbox's copy of its ``reply`` (one transaction), and put it in
        the context; its seq."""
        seq = await self.store.sessions.append_answer(self.session_id, message, inbox_id, reply)
        self._append(seq, message)
        return seq

    async def resume(self, user_seq: int, message: dict[str, Any] | None = None) -> None:
        """Make the context end at the stored user message ``user_seq``: cut after it when it is there, else add
        it (``message`` when given: stored at intake; else read back from the store). Writes nothing stored."""
        if self._cut_after(user_seq):
            return
        if message is not None:
            self._append(user_seq, message)
        else:
            self._extend(await self.store.sessions.load_messages(self.session_id, user_seq, user_seq))

    async def apply(self, messages: list[CtxMessage], start: int | None = None) -> None:
        """Make ``messages`` (a prepared or trimmed context) the context; with ``start``, the boundary moves
        there when that is later (turns before it left the context)."""
        self._replace(messages)
        if start is not None and start > self.context_start_seq:
            await self.move_boundary(start)

    async def move_boundary(self, seq: int) -> None:
        """The context now starts at ``seq``, in memory and in the store."""
        self._move_boundary(seq)
        await self.store.sessions.set_context_start(self.session_id, seq)

    async def clear(self) -> None:
        """Empty the context by moving the boundary past every stored message, and reset the summary. Rows are
        kept."""
        record = await self.store.sessions.get(self.session_id)
        last = record.last_seq if record else max((m.seq for m in self.messages), default=0)
        self._reset(last)
        await self.store.sessions.set_context_start(self.session_id, last + 1)
        await self.store.sessions.set_summary(self.session_id, None)

    async def swap_media(self, seq: int, message: dict[str, Any]) -> bool:
        """Put ``message`` (a photo now words) in place of the stored message ``seq``, in the store, then in the
        context when it is still there; False when the store has no such message."""
        if not await self.store.run(rewrite_message, self.session_id, seq, message):
            return False
        self._swap(seq, message)
        return True

    @contextmanager
    def showing(self, lines: list[str]) -> Iterator[None]:
        """During a group turn: the group's background ``lines`` shown with its request, never stored."""
        self.background = lines
        try:
            yield
        finally:
            self.background = []

    # --- the live-only writers (this module's and the manager's) ---------------------------------------------------
    def _append(self, seq: int, message: dict[str, Any]) -> None:
        self.messages.append(CtxMessage(seq=seq, message=message))

    def _extend(self, stored: Iterable[StoredMessage]) -> None:
        self.messages.extend(CtxMessage(seq=m.seq, message=m.message) for m in stored)

    def _cut_after(self, user_seq: int) -> bool:
        for i, m in enumerate(self.messages):
            if m.seq == user_seq and m.message.get("role") == "user":
                del self.messages[i + 1:]
                return True
        return False

    def _replace(self, messages: list[CtxMessage]) -> None:
        self.messages = messages

    def _swap(self, seq: int, message: dict[str, Any]) -> bool:
        for i, m in enumerate(self.messages):
            if m.seq == seq:
                self.messages[i] = CtxMessage(seq=seq, message=message)
                return True
        return False

    def _move_boundary(self, seq: int) -> None:
        self.context_start_seq = seq

    def _set_summary(self, summary: str | None, turns: int, through_seq: int = 0) -> None:
        self.summary, self.summary_turns = summary, turns if summary else 0
        self._mark_summarized(through_seq)

    def _mark_summarized(self, through_seq: int) -> None:
        self.summarized_through_seq = max(self.summarized_through_seq, through_seq)  # it never goes back

    def _reset(self, last_seq: int) -> None:
        self.messages = []
        self.context_start_seq = last_seq + 1
        self.summary, self.summary_turns = None, 0

    def touch(self, now: float) -> None:
        """Used now (for idle eviction)."""
        self.last_used = now

    def expect_summaries(self, ready: asyncio.Future | None) -> None:
        """The next turn waits for ``ready`` (the summaries a restore queued)."""
        self.ready = ready
