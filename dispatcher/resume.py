"""Crash resume: the messages journalled but never answered (crash, kill -9, shutdown mid-turn) become
tickets again, each in the session it was journalled in."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Container, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from channels.base import BaseChannel
from core.messages import RESUMED, RESUMED_QUOTE, IncomingMessage
from core.records import PendingIncoming
from dispatcher.identity import session_for
from dispatcher.intake import RecentIds, accept, evaluate
from dispatcher.journal import Journalled, journalled
from dispatcher.queue import Ticket, journal_ticket
from reminders.firing import REMINDER
from store.engine import database_unavailable
from store.store import Store

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)


async def pending_items(store: Store, cfg: Config, channels: Mapping[str, BaseChannel],
                        recent: RecentIds, live_ids: Callable[[], Awaitable[set[int]]] | None = None,
                        skip: Container[str] = (),
                        ) -> AsyncIterator[Ticket]:
    """Work items for every unanswered journal entry whose channel is running, oldest first.

    ``live_ids`` gives the journal ids of messages received live since start, which are queued already;
    it is awaited after the entries are read, so every live message journalled before that read is in it.
    Without it (intake was not held), a message whose id is in ``recent`` counts as received live.
    Items are yielded one by one, so each is queued before the next is read. Their ids go into ``recent``,
    so a platform delivering them again is answered once. An entry whose reply is in the outbox gets it.
    """
    replies = await store.journal.pending_replies()
    rows = await store.journal.pending()
    live = await live_ids() if live_ids is not None else set()
    for row in rows:
        if row.id in live:
            continue
        msg = IncomingMessage.from_json(row.payload)
        if msg.channel in skip:  # answered another way (several processes: dispatcher/claims.py)
            continue
        channel = channels.get(msg.channel)
        if channel is None:
            logger.warning("cannot resume message %s: channel %s is not running", row.id, msg.channel)
            continue
        if live_ids is None and (msg.channel, msg.message_id) in recent:
            continue
        recent.add(msg.channel, msg.message_id)
        yield await resumed_item(store, cfg, channel, row, answering(msg, channel), reply=replies.get(row.id))


#: The most of a question a resumed answer quotes, in characters.
QUOTE_CHARS = 200


def answering(msg: IncomingMessage, channel: BaseChannel) -> IncomingMessage:
    """``msg``, marked so that its answer, coming after a restart and maybe after later messages, shows the
    question it answers: a channel that threads replies answers the message itself (Telegram), any other gets
    the question quoted above the answer (issue 40)."""
    if msg.content_type == REMINDER:  # a reminder due during the outage answers no question
        return msg
    extra = {**msg.extra, RESUMED: True}
    if not channel.threads_replies:
        extra[RESUMED_QUOTE] = quote(msg.text.strip() or f"[{msg.content_type}]")
    return dataclasses.replace(msg, extra=extra)


def quote(text: str) -> str:
    """``text`` as a quote: each line after "> ", cut to :data:`QUOTE_CHARS` characters."""
    if len(text) > QUOTE_CHARS:
        text = text[:QUOTE_CHARS - 1].rstrip() + "…"
    return "\n".join(f"> {line}" if line.strip() else ">" for line in text.splitlines())


async def resumed_item(store: Store, cfg: Config, channel: BaseChannel, row: PendingIncoming,
                       msg: IncomingMessage, *, reply: str | None = None, resumed: bool = True) -> Ticket:
    """The ticket of a journalled message, in the session it was journalled in, with the reply kept for it in the
    outbox (if any): its journal value is known already."""
    info = session_for(msg, cfg)
    if info.session_id != row.session_id:
        # group_shared_session changed since the message was journalled: it stays in its own session.
        info = dataclasses.replace(info, session_id=row.session_id)
    if await store.sessions.get(row.session_id) is None:
        await store.sessions.ensure(info)
    trigger = evaluate(msg, cfg, channel.bot_username, accepted=True)
    text = trigger.text if row.user_seq is None else ""  # else its user message is stored: the turn reads that
    accepted = accept(msg, info, text, trigger.command)
    return journal_ticket(accepted, journalled(accepted, row.id, row.user_seq, reply=reply, resumed=resumed))


class JournalReader:
    """The journal as claimed runs read it (dispatcher/claims.py ``JournalView``): several processes."""

    def __init__(self, store: Store, config: Callable[[], Config], channels: Mapping[str, BaseChannel],
                 claimed: Callable[[str], bool], recent: RecentIds, started_at: datetime,
                 mark_done: Callable[[int], Awaitable[Any]]) -> None:
        self.store, self.config, self._channels, self.claimed = store, config, channels, claimed
        self.recent, self.started_at, self.mark_done = recent, started_at, mark_done

    def channels(self) -> list[str]:
        return [name for name in self._channels if self.claimed(name)]

    async def claim_view(self, session_id: str) -> tuple[list[PendingIncoming], tuple[int, int] | None]:
        return await self.store.journal.claim_view(session_id, self.channels())

    async def pending_sessions(self) -> list[str]:
        return await self.store.journal.pending_sessions(self.channels())

    async def ticket(self, row: PendingIncoming) -> Ticket | None:
        """A row read back as a ticket; one that cannot become a ticket is logged and marked answered, so the
        sweep does not find it again every few seconds."""
        try:
            return await self._ticket(row)
        except Exception as exc:
            if database_unavailable(exc):
                raise
            logger.exception("message %d of session %s cannot be answered; dropped", row.id, row.session_id)
            await self.mark_done(row.id)
            return None

    async def _ticket(self, row: PendingIncoming) -> Ticket | None:
        msg = IncomingMessage.from_json(row.payload)
        channel = self._channels.get(msg.channel)
        if channel is None:
            return None
        self.recent.add(msg.channel, msg.message_id)
        if msg.time.tzinfo is not None and msg.time < self.started_at:
            msg = answering(msg, channel)  # sent before this process started: its answer comes after a restart
        return await resumed_item(self.store, self.config(), channel, row, msg, reply=row.reply)


class HeldIntake:
    """Until crash resume has queued the journal's unanswered messages, live ones are journalled but held here.

    Held from before the channels start: a platform redelivers what a killed process fetched but never
    confirmed. Queued at once, such a message found its journal row (a duplicate, ignored) while resume skipped
    the row as "arrived live" (lost), and a session's new messages overtook its resumed ones (answered out of
    order). Held messages are journalled at once all the same: the platform counts them as delivered.
    """

    def __init__(self) -> None:
        self._tickets: list[Ticket] | None = None

    @property
    def holding(self) -> bool:
        return self._tickets is not None

    def hold(self) -> None:
        if self._tickets is None:
            self._tickets = []

    def keep(self, ticket: Ticket) -> bool:
        """Hold ``ticket`` if intake is held (True)."""
        if self._tickets is None:
            return False
        self._tickets.append(ticket)
        return True

    async def live_ids(self) -> set[int]:
        """Journal ids of the messages received live since start (their journal writes awaited)."""
        written = await asyncio.gather(*(t.recorded for t in list(self._tickets or ())), return_exceptions=True)
        return {j.inbox_id for j in written if isinstance(j, Journalled)}

    def release(self) -> list[Ticket]:
        """Stop holding; the tickets held, in arrival order."""
        held, self._tickets = self._tickets, None
        return held or []


async def resume(store: Store, cfg: Config, channels: Mapping[str, BaseChannel],
                 claimed: Callable[[str], bool], recent: RecentIds, held: HeldIntake,
                 enqueue: Callable[[Ticket], None]) -> int:
    """Queue every message that was journalled but never answered (crash, kill -9, shutdown mid-turn), then the
    held live messages, in arrival order, behind them; return how many were resumed. With several processes,
    the claimed channels' messages are left to claimed runs of their sessions (in journal order, so resumed
    and live messages cannot overtake each other)."""
    own = {name: c for name, c in channels.items() if not claimed(name)}
    count = 0
    try:
        live_ids = held.live_ids if held.holding else None
        if own:
            async for ticket in pending_items(store, cfg, own, recent, live_ids, skip=set(channels) - set(own)):
                enqueue(ticket)
                count += 1
    finally:
        for ticket in held.release():
            enqueue(ticket)  # one that a resumed message answers resolves as a journal duplicate
    return count


async def kept_reply_ticket(store: Store, cfg: Config, channels: Mapping[str, BaseChannel],
                            recent: RecentIds, row: PendingIncoming) -> Ticket | None:
    """The ticket of a journal row whose reply was kept outside intake (a reminder that fell due): sent like a
    resumed one; None when its channel is not running here (it stays pending until a start where it is)."""
    msg = IncomingMessage.from_json(row.payload)
    channel = channels.get(msg.channel)
    if channel is None:
        logger.warning("journal row %d: channel %s is not running here", row.id, msg.channel)
        return None
    recent.add(msg.channel, msg.message_id)
    return await resumed_item(store, cfg, channel, row, msg, reply=row.reply, resumed=False)
