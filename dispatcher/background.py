"""Group background (DESIGN §1.3): what a group said without asking the bot, shown with the next request.

Intake keeps every untriggered text message of a served group (:func:`dispatcher.intake.evaluate`)
as one row of ``group_messages``, and marks each request to the bot there with a trigger row. Both carry
the time the bot received them, from one strictly increasing clock, which orders a group's rows whatever
order the writes commit in. The request's own time travels in its journalled message
(``extra["received_at"]``), so a request resumed after a crash sees the same background.

When the request's turn runs, :func:`background_lines` reads what was said after the group's previous
trigger and before this one: at most ``group_context_messages`` lines, oldest first, as
``[HH:MM Name] text`` in the configured zone. The agent shows them with the request within the token
budget (agent/context.py), and never stores them as a turn: they stay in their group's table only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from core.messages import IncomingMessage
from store.group_messages import BACKGROUND, TRIGGER

if TYPE_CHECKING:
    from config.settings import Config
    from store.store import Store

logger = logging.getLogger(__name__)

#: Where the time a request was received travels in its IncomingMessage (and so in the journal).
RECEIVED_AT = "received_at"


class GroupBackground:
    """Stores group background messages and trigger marks, one small insert each, off the caller's path."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._last = datetime.fromtimestamp(0, UTC)
        self._writes: set[asyncio.Task] = set()

    def now(self) -> datetime:
        """The current UTC time, strictly later than any time this clock gave before."""
        now = datetime.now(UTC)
        if now <= self._last:
            now = self._last + timedelta(microseconds=1)
        self._last = now
        return now

    def keep(self, msg: IncomingMessage, text: str) -> None:
        """Store an untriggered group message as background (the write runs on its own)."""
        self._write(msg, text, BACKGROUND, self.now())

    def mark(self, msg: IncomingMessage) -> IncomingMessage:
        """Mark a request to the bot in a group; return the message carrying the time it was received."""
        received = self.now()
        self._write(msg, "", TRIGGER, received)
        return dataclasses.replace(msg, extra={**msg.extra, RECEIVED_AT: received.isoformat()})

    def _write(self, msg: IncomingMessage, text: str, kind: str, received: datetime) -> None:
        task = asyncio.ensure_future(self.store.groups.add(
            msg.channel, msg.chat_id, msg.user_name or msg.user_id, text, kind, msg.time, received))
        self._writes.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("could not store a group message: %s", task.exception())

    async def flush(self) -> None:
        """Wait until every write started so far has finished."""
        if self._writes:
            await asyncio.gather(*set(self._writes), return_exceptions=True)


def format_line(user_name: str, text: str, sent_at: datetime, zone: Any) -> str:
    """One background message as the model sees it: ``[HH:MM Name] text``."""
    return f"[{sent_at.astimezone(zone):%H:%M} {user_name}] {text}"


async def background_lines(store: Store, msg: IncomingMessage, cfg: Config) -> list[str]:
    """The group's background for a request, oldest first; [] outside groups or when turned off."""
    limit = cfg.group_context_messages
    received = msg.extra.get(RECEIVED_AT) if msg.is_group else None
    if limit <= 0 or not received:
        return []
    rows = await store.groups.background(msg.channel, msg.chat_id, datetime.fromisoformat(received), limit)
    zone = cfg.zone()
    return [format_line(row.user_name, row.text, row.sent_at, zone) for row in rows]
