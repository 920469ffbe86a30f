"""The session manager: in-memory session contexts, loaded lazily from the store and evicted when idle.

Restart recovery (DESIGN §4) happens here, at a session's first message after start (or after
eviction): the last ``max(3, agent_max_context_turns // 6)`` turns after ``context_start_seq`` that come
*before* the new message come back as text only, the persisted summary is re-injected, and older turns
after the boundary that were never summarised are handed to the summariser with reason ``restore``.

The new message is the session's oldest user message still waiting for its answer (stored at intake, its
inbox row pending): it and any later waiting ones are not restored, their own turns add them. The first
reply then waits (``SessionState.ready``, agent/session.py) for the session's summary jobs, so it sees what
every turn after the boundary said.

Each context is a :class:`~agent.session.SessionState`, the handle that writes it; this module and that one
are the session's owner (``tests/agent/test_session_owner.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from agent.session import DropSink, SessionState
from core.records import SessionInfo, StoredMessage
from core.turns import CtxMessage, Turn, conversation_turns, restore_turn_count, text_only
from store.store import Store

if TYPE_CHECKING:
    from config.settings import Config
    from store.reminders import Reminders

T = TypeVar("T")

logger = logging.getLogger(__name__)


@runtime_checkable
class SummarizesNow(Protocol):
    """A drop sink that can also summarise at once (the summariser), for ``/compact``."""

    async def summarize_now(self, session_id: str, reason: str, from_seq: int, through_seq: int) -> str | None:
        """Summarise ``from_seq..through_seq`` now (after the session's queued jobs); None for "none"."""
        ...


@dataclass(frozen=True, slots=True)
class CompactResult:
    """What :meth:`SessionManager.compact` did."""

    turns: int  # turns taken out of the context; 0 when there was nothing to compact
    summary: str | None = None  # the summary made now; None when there was nothing worth keeping
    background: bool = False  # no summariser to ask now: a background job writes the summary
    failed: bool = False  # summarising now failed: a background job writes the summary


#: Contexts idle this long are dropped from memory. Far below the shortest retention (1 day), so the
#: cleanup job never deletes a session whose context is still held here.
IDLE_EVICT_SECONDS = 6 * 3600.0
SWEEP_INTERVAL = 60.0
class LoggingDropSink:
    """A drop sink that only logs; used when no summariser is configured."""

    async def submit(self, session_id: str, reason: str, from_seq: int, through_seq: int) -> None:
        """Log the drop."""
        logger.info("session %s: messages %d-%d left the context (%s)", session_id, from_seq, through_seq, reason)

    def note_cleared(self, session_id: str) -> None:
        """Nothing is queued, so nothing to hold back."""

    def settled(self, session_id: str) -> asyncio.Future | None:
        """Nothing is ever queued."""
        return None


class LiveSessions(OrderedDict[str, SessionState]):
    """The loaded session contexts, least recently used first: the :class:`SessionManager` loads and evicts them.

    It is also the summariser's port (summaries/collaborators.py ``SummaryTarget``): a summary is written to the
    store and to the live state here, in one place. These methods do not take the session's lock: a turn holds
    it while it waits for its summaries. They change the live state without awaiting after the store write, so
    no turn sees half of a change.
    """

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store

    def peek(self, session_id: str) -> SessionState | None:
        """The loaded state, if any, without loading."""
        return self.get(session_id)

    async def inject(self, session_id: str, summary: str, turns: int, through_seq: int,
                     superseded: Callable[[], bool]) -> bool:
        """Make ``summary`` (covering ``turns`` turns, made through ``through_seq``) the session's injected summary:
        stored, then live. When ``superseded()`` turns true while storing (a clear came), the stored summary is
        reset again and the live one left alone; False then."""
        await self.store.sessions.set_summary(session_id, summary, turns, through_seq=through_seq)
        if superseded():  # cleared while writing: a cleared context starts empty
            await self.store.sessions.set_summary(session_id, None, 0, through_seq=through_seq)
            return False
        state = self.get(session_id)
        if state is not None:
            state._set_summary(summary, turns, through_seq)
        return True

    async def mark_summarized(self, session_id: str, through_seq: int) -> None:
        """Messages through ``through_seq`` are summarised; the summary stays as it is."""
        await self.store.sessions.set_summarized_through(session_id, through_seq)
        state = self.get(session_id)
        if state is not None:
            state._mark_summarized(through_seq)

    async def reset_summary(self, session_id: str, through_seq: int) -> None:
        """No injected summary (a clear job), messages through ``through_seq`` summarised."""
        await self.store.sessions.set_summary(session_id, None, 0, through_seq=through_seq)
        state = self.get(session_id)
        if state is not None:
            state._set_summary(None, 0, through_seq)


class SessionManager:
    """Holds loaded session contexts, at most ``max_cached`` of them (least recently used evicted)."""

    def __init__(self, store: Store, config: Callable[[], Config], sink: DropSink,
                 max_cached: int = 2000, max_idle: float = IDLE_EVICT_SECONDS,
                 live: LiveSessions | None = None) -> None:
        self.store = store
        self.config = config
        self.sink = sink
        self.max_cached = max_cached
        self.max_idle = max_idle
        self._last_sweep = time.monotonic()
        self._states = live if live is not None else LiveSessions(store)
        self._loading: dict[str, asyncio.Future] = {}

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._states

    @property
    def live(self) -> LiveSessions:
        """The loaded contexts, and the summariser's port into them."""
        return self._states

    def peek(self, session_id: str) -> SessionState | None:
        """The loaded state, if any, without loading."""
        return self._states.get(session_id)

    async def get(self, info: SessionInfo) -> SessionState:
        """The session's context, restored from the store on first use."""
        now = time.monotonic()
        if now - self._last_sweep > SWEEP_INTERVAL:
            self._sweep(now)
        state = self._states.get(info.session_id)
        if state is not None:
            self._states.move_to_end(info.session_id)
            state.touch(now)
            return state
        pending = self._loading.get(info.session_id)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._loading[info.session_id] = fut
        try:
            state = await self._load(info)
            self._evict(keep=info.session_id)
            fut.set_result(state)
            return state
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved
            raise
        finally:
            del self._loading[info.session_id]

    def _evict(self, keep: str) -> None:
        """Drop least recently used contexts over ``max_cached``; never a running one, nor ``keep``
        (the one just loaded: its caller and the summariser must find it)."""
        while len(self._states) > self.max_cached:
            for sid, st in self._states.items():
                if sid != keep and not st.lock.locked():
                    del self._states[sid]
                    logger.debug("evicted idle session %s", sid)
                    break
            else:
                return

    def _sweep(self, now: float) -> None:
        """Drop contexts idle for ``max_idle`` seconds (LRU order: the idlest come first)."""
        self._last_sweep = now
        for sid in [sid for sid, st in self._states.items()
                    if now - st.last_used > self.max_idle and not st.lock.locked()]:
            del self._states[sid]

    async def clear(self, info: SessionInfo) -> int:
        """``/context clear``: hand the turns never summarised to the sink (reason ``clear``), then empty the
        context (:meth:`SessionState.clear`). Returns how many turns went to memory."""
        state = await self.get(info)
        sid = info.session_id
        async with state.lock:
            record = await self.store.sessions.get(sid)
            last = record.last_seq if record else max((m.seq for m in state.messages), default=0)
            done = max(state.summarized_through_seq, record.summarized_through_seq if record else 0)
            first = max(state.context_start_seq, done + 1)
            saved = 0
            if first <= last:
                stored = await self.store.sessions.load_messages(sid, first, last)
                saved = sum(1 for m in stored if m.message.get("role") == "user")
                if stored:
                    await self.sink.submit(sid, "clear", first, last)
            await state.clear()
        logger.info("session %s: context cleared (%d turns to memory)", sid, saved)
        return saved

    async def compact(self, info: SessionInfo) -> CompactResult:
        """``/compact``: keep only the last turn in the context and summarise the others now (reason ``compact``).

        The summary is injected as after a trim. Without a summariser, or when summarising now fails, a
        background job writes it instead.
        """
        state = await self.get(info)
        sid = info.session_id
        async with state.lock:
            turns = [t for t in state.turns() if t.first_seq]
            if len(turns) <= 1:
                return CompactResult(turns=0)
            keep = turns[-1]
            first, through = turns[0].first_seq, keep.first_seq - 1
            await state.apply(list(keep.messages), keep.first_seq)
            dropped = len(turns) - 1
            if not isinstance(self.sink, SummarizesNow):
                await self.sink.submit(sid, "compact", first, through)
                return CompactResult(turns=dropped, background=True)
            try:
                summary = await self.sink.summarize_now(sid, "compact", first, through)
            except Exception:  # noqa: BLE001 - the turns are stored; let the background job summarise them
                logger.exception("session %s: summarising now failed; queued instead", sid)
                await self.sink.submit(sid, "compact", first, through)
                return CompactResult(turns=dropped, failed=True)
            # The summariser injected through LiveSessions; a state evicted and reloaded meanwhile is another
            # object: make this one match the store too.
            record = await self.store.sessions.get(sid)
            if record is not None:
                state._set_summary(record.summary, record.summary_turns, record.summarized_through_seq)
        logger.info("session %s: compacted %d turns", sid, dropped)
        return CompactResult(turns=dropped, summary=summary)

    def forget(self, session_id: str) -> None:
        """Drop a session's in-memory context; it is rebuilt from the store when next needed."""
        self._states.pop(session_id, None)

    async def erase(self, session_id: str, delete: Callable[[], Awaitable[T]]) -> T:
        """``/forget``: run ``delete`` (which deletes the session's rows and files) on the session's lock when
        its context is loaded, empty that context (a turn already waiting for the lock holds it: it must see
        nothing forgotten), and drop it. Returns what ``delete`` returned."""
        state = self._states.get(session_id)
        if state is None:
            result = await delete()
        else:
            async with state.lock:
                result = await delete()
                state._reset(0)
        self.forget(session_id)
        return result

    async def note(self, reminders: Reminders, session_id: str, inbox_id: int, message: dict[str, Any],
                   payload: dict[str, Any]) -> int | None:
        """A fired reminder's text as an assistant message of its session: stored once (its journal row
        ``inbox_id`` gets ``payload``), and added to the context when that is loaded. The seq; None when it
        was stored already."""
        state = self._states.get(session_id)
        if state is None:
            return await reminders.note_in_history(session_id, inbox_id, message, payload)
        async with state.lock:
            seq = await reminders.note_in_history(session_id, inbox_id, message, payload)
            if seq is not None:
                state._append(seq, message)
        return seq

    async def _load(self, info: SessionInfo) -> SessionState:
        keep = restore_turn_count(self.config().agent_max_context_turns)
        # The last `keep` turns through an index range scan; huge tool chains fall back to the whole range.
        record, window, waiting = await self.store.sessions.open(info, limit=keep * 40)
        start = record.context_start_seq
        if waiting is not None:  # the new message and later waiting ones are added by their own turns
            window = [m for m in window if m.seq < waiting]
        turns = _stored_turns(window)
        if len(turns) < keep and window and window[0].seq > start:
            window = await self.store.sessions.load_messages(info.session_id, start,
                                                    waiting - 1 if waiting is not None else None)
            turns = _stored_turns(window)
        kept = turns[-keep:]
        messages = [m for turn in kept for m in text_only(turn).messages]
        state = SessionState(info=info, messages=messages, context_start_seq=start, store=self.store,
                             summary=record.summary, summary_turns=record.summary_turns,
                             summarized_through_seq=record.summarized_through_seq)
        # Registered before anything else awaits, so a summary finishing meanwhile finds the live state.
        self._states[info.session_id] = state
        first_kept = kept[0].first_seq if kept else (waiting if waiting is not None else record.last_seq + 1)
        # Older turns after the boundary that were never summarised go to the summariser.
        skip_from = max(start, record.summarized_through_seq + 1)
        if skip_from < first_kept:
            await self.sink.submit(info.session_id, "restore", skip_from, first_kept - 1)
        # the restore job, and jobs the last process left, before the first reply
        state.expect_summaries(self.sink.settled(info.session_id))
        if first_kept != start:
            await state.move_boundary(first_kept)
        if len(window) > 1:  # not a new session holding only the message that just arrived
            logger.info("session %s restored: %d turns in context from seq %d", info.session_id,
                        len(kept), state.context_start_seq)
        return state


def _stored_turns(stored: list[StoredMessage]) -> list[Turn]:
    """Stored messages as turns; messages before the first user message are left out."""
    return conversation_turns([CtxMessage(seq=m.seq, message=m.message) for m in stored])
