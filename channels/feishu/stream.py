"""A streamed reply on Feishu: one card sent at the first words, then patched in place as the answer grows.

The first card goes out once the answer has :data:`FIRST_CHARS` characters or :data:`FIRST_HOLD` seconds after
its first piece. Then a background pump patches the card to the latest text at most once per ``edit_interval``
(Feishu allows a message about five updates a second). Past :data:`~channels.feishu.api.MESSAGE_LIMIT`
characters the card is completed with its piece and the answer goes on in a new card. :meth:`finish` makes the
last patch with the final text and sends what does not fit as further cards. Every API call of a stream happens
under its lock, so the pump and :meth:`finish` never race for the card.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from channels.feishu.api import MESSAGE_LIMIT, FeishuAPI
from channels.stream import PumpedReplyStream
from channels.text import cut_point, split_text
from core.messages import IncomingMessage


class CardChannel(Protocol):
    """What a streamed reply uses of the Feishu channel (``channels/feishu/channel.py`` ``FeishuChannel``)."""

    api: FeishuAPI
    #: seconds between two updates of the card
    edit_interval: float

    def reply_to(self, to: IncomingMessage) -> str:
        """The message id a group's first card replies to ("" for none)."""
        ...

    async def send(self, to: IncomingMessage, text: str) -> None:
        """Send ``text`` whole, as the channel sends answers."""
        ...

    async def answered(self, to: IncomingMessage) -> None:
        """The answer to ``to`` is out."""
        ...

logger = logging.getLogger(__name__)

#: the first card waits for this many characters, or FIRST_HOLD seconds after the first piece
FIRST_CHARS = 40
FIRST_HOLD = 0.5


class FeishuReplyStream(PumpedReplyStream):
    """One streamed reply in one chat (see the module docstring)."""

    def __init__(self, channel: CardChannel, to: IncomingMessage) -> None:
        super().__init__()
        self.channel = channel
        self.to = to
        #: the question the first card replies to (in groups), "" once it is sent
        self._reply_to = channel.reply_to(to)
        self._reset()

    def _reset(self) -> None:
        #: the whole text pushed so far; where the current card starts in it; the card and what it shows
        self.text = ""
        self.start = 0
        self.message_id: str | None = None
        self.shown = ""
        self._closed = False

    async def push(self, text: str) -> None:
        """Take the answer so far; the pump shows it."""
        if self._closed:
            return
        self.text = text
        self._wake_pump(f"feishu:stream:{self.to.chat_id}")

    async def discard(self) -> None:
        """Complete what was shown to the last pushed text; a later push starts a new card."""
        await self._stop_pump()
        async with self._lock:
            if self.message_id is not None:
                with contextlib.suppress(Exception):
                    await self._show()
            self._reset()

    async def finish(self, text: str) -> None:
        """The final answer: the last patch of the current card, then any further cards."""
        await self._stop_pump()
        async with self._lock:
            shown_any = self.message_id is not None or self.start > 0
            if not shown_any or text[:self.start] != self.text[:self.start]:
                self._reset()
                await self.channel.send(self.to, text)
                return
            pieces = split_text(text[self.start:], MESSAGE_LIMIT)
            if pieces:
                first, more = pieces[0], pieces[1:]
                if self.message_id is None:
                    await self._send(first)
                elif first != self.shown:
                    await asyncio.to_thread(self.channel.api.patch_card, self.message_id, first)
                for piece in more:
                    await self._send(piece)
            self._reset()
        await self.channel.answered(self.to)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        first_at = loop.time()
        try:
            while not self._closed:
                if self.text[self.start:].strip() == self.shown:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                # The first card waits for FIRST_CHARS characters or FIRST_HOLD seconds: a short answer goes out
                # whole, and a remark before tool calls ("let me check") is usually never shown.
                if self.message_id is None and self.start == 0:
                    await self._hold_first(first_at, FIRST_CHARS, FIRST_HOLD)
                async with self._lock:
                    if self._closed:
                        return
                    await self._show()
                await asyncio.sleep(self.channel.edit_interval)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the final answer still comes; only the live view stops
            logger.exception("feishu: a streamed reply could not be updated")

    async def _show(self) -> None:
        """Bring the chat up to the latest text; complete cards that are full."""
        while len(self.text) - self.start > MESSAGE_LIMIT:
            end, nxt = cut_point(self.text[self.start:], MESSAGE_LIMIT)
            piece = self.text[self.start:self.start + end]
            if self.message_id is None:
                await self._send(piece)
            elif piece != self.shown:
                await asyncio.to_thread(self.channel.api.patch_card, self.message_id, piece)
            self.start += nxt
            self.message_id, self.shown = None, ""
        current = self.text[self.start:].strip()
        if not current or current == self.shown:
            return
        if self.message_id is None:
            self.message_id = await asyncio.to_thread(self.channel.api.send_card, self.to.chat_id, current,
                                                      self._take_reply_to())
        else:
            await asyncio.to_thread(self.channel.api.patch_card, self.message_id, current)
        self.shown = current

    async def _send(self, piece: str) -> None:
        await asyncio.to_thread(self.channel.api.send_card, self.to.chat_id, piece, self._take_reply_to())

    def _take_reply_to(self) -> str:
        reply_to, self._reply_to = self._reply_to, ""
        return reply_to
