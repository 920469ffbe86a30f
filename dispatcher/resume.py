"""Crash resume: the messages journalled but never answered (crash, kill -9, shutdown mid-turn) become
work items again, each in the session it was journalled in."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Container, Mapping
from typing import TYPE_CHECKING

from channels.base import BaseChannel
from core.messages import RESUMED, RESUMED_QUOTE, IncomingMessage
from core.records import PendingIncoming
from dispatcher.identity import session_for
from dispatcher.intake import RecentIds, WorkItem, evaluate
from reminders.firing import REMINDER
from store.store import Store

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)


async def pending_items(store: Store, cfg: Config, channels: Mapping[str, BaseChannel],
                        recent: RecentIds, live_ids: Callable[[], Awaitable[set[int]]] | None = None,
                        skip: Container[str] = (),
                        ) -> AsyncIterator[WorkItem]:
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
        item = await resumed_item(store, cfg, channel, row, answering(msg, channel))
        item.reply = replies.get(row.id)
        yield item


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
                       msg: IncomingMessage) -> WorkItem:
    """The work item of a journalled message, in the session it was journalled in."""
    info = session_for(msg, cfg)
    if info.session_id != row.session_id:
        # group_shared_session changed since the message was journalled: it stays in its own session.
        info = dataclasses.replace(info, session_id=row.session_id)
    if await store.sessions.get(row.session_id) is None:
        await store.sessions.ensure(info)
    trigger = evaluate(msg, cfg, channel.bot_username, accepted=True)
    text = trigger.text if row.user_seq is None else ""  # else its user message is stored: the turn reads that
    item = WorkItem(message=msg, info=info, text=text, command=trigger.command, inbox_id=row.id,
                    user_seq=row.user_seq, resumed=True)
    recorded = asyncio.get_running_loop().create_future()
    recorded.set_result((row.id, row.user_seq))
    item.recorded = recorded
    return item
