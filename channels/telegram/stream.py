"""A streamed reply on Telegram: one message sent at the first words, then edited in place.

The first message goes out once the answer has :data:`FIRST_CHARS` characters or :data:`FIRST_HOLD`
seconds after its first piece, whichever comes first: a short answer that the model writes at once is
sent whole (one call, one notification with the real text), and a pre-tool remark ("let me check") is
usually never shown. Then a background pump edits the message to the latest text, as plain text, at
the chat's pace (:meth:`TelegramChannel.edit_slot`: about once a second). A flood limit is waited out
and the call retried by python-telegram-bot's ``AIORateLimiter`` (see :mod:`channels.telegram.channel`);
one that outlasts its retries holds the chat, and the skipped edits are simply folded into the next one.
Past 4,096 characters the message is finished with its formatted text and the answer continues in a new
one. :meth:`finish` makes the last edit with formatting (HTML, or plain text where Telegram rejects the
markup: :func:`~channels.telegram.sender.send_or_edit_html`), and sends what does not fit as further
messages; a final edit that still fails goes back to the outbox, which tries it again.

Every Bot API call of a stream happens under its lock, so the pump and :meth:`finish` never race for
the message id; the pump is only cancelled between calls, and never awaited while the lock is held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from telegram.error import BadRequest, RetryAfter, TelegramError

from channels.stream import PumpedReplyStream
from channels.telegram.markdown import escape
from channels.telegram.sender import Sender, retry_seconds, send_or_edit_html
from channels.telegram.text import MAX_MESSAGE_LENGTH, render_chunks, render_piece, utf16_len
from core.messages import IncomingMessage

logger = logging.getLogger(__name__)

#: The first message waits for this many characters, or :data:`FIRST_HOLD` seconds after the first piece.
FIRST_CHARS = 40
FIRST_HOLD = 0.5


class TelegramReplyStream(PumpedReplyStream):
    """One streamed reply in one chat (see the module docstring)."""

    def __init__(self, channel: Sender, to: IncomingMessage) -> None:
        super().__init__()
        self.channel = channel
        self.to = to
        self.chat_id = int(to.chat_id)
        self._base, self._reply = channel.send_options(to)
        self._reset()

    def _reset(self) -> None:
        #: the whole text pushed so far
        self.text = ""
        #: where the current message starts in ``text``; what is before it is in finished messages
        self.start = 0
        #: the code fence left open before ``start``
        self.opener = ""
        self.message_id: int | None = None
        #: what the current message shows now (plain)
        self.shown = ""
        self._first_at: float | None = None
        self._closed = False

    # --- ReplyStream ---------------------------------------------------------------------------
    async def push(self, text: str) -> None:
        """Take the answer so far; the pump shows it at the chat's pace."""
        if self._closed:
            return
        self.text = text
        if self._first_at is None:
            self._first_at = asyncio.get_running_loop().time()
        self._wake_pump(f"telegram:stream:{self.chat_id}")

    async def discard(self) -> None:
        """Complete what was shown to the last pushed text; a later push starts a new message."""
        await self._stop_pump()
        async with self._lock:
            if self.message_id is not None or self.start:
                with contextlib.suppress(TelegramError):
                    await self._show()
            self._reset()

    async def finish(self, text: str) -> None:
        """The final answer, formatted: the last edit of the current message, then any further messages."""
        await self._stop_pump()
        async with self._lock:
            shown_any = self.message_id is not None or self.start > 0
            if not shown_any or text[:self.start] != self.text[:self.start]:
                if shown_any:  # an after_reply hook changed text already finished in an earlier message
                    logger.info("telegram: the final reply differs from what streamed; sending it whole")
                self._reset()
                await self.channel.send(self.to, text)
                return
            await self._final(text)
            self._reset()

    # --- the pump ------------------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self._closed:
                if self.text[self.start:] == self.shown:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if self.message_id is None and self.start == 0:
                    # Hold the first message briefly (see the module docstring).
                    await self._hold_first(self._first_at or loop.time(), FIRST_CHARS, FIRST_HOLD)
                    self.channel.edit_slot(self.chat_id, self.to.is_group)  # a send counts toward the pace
                else:
                    await asyncio.sleep(self.channel.edit_slot(self.chat_id, self.to.is_group))
                async with self._lock:
                    if self._closed:
                        return
                    await self._show()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the final edit still comes; only the live view stops
            logger.exception("telegram: a streamed reply could not be updated")

    async def _show(self) -> None:
        """Bring the chat up to the latest text, as plain text; finish messages that are full."""
        while utf16_len(self.text[self.start:]) > MAX_MESSAGE_LENGTH:
            source, rendered, opener = render_piece(self.text, self.start, self.opener)
            await self._complete_message(source, rendered)
            self.start += len(source)
            self.opener = opener
        current = self.text[self.start:]
        if not current.strip() or current == self.shown:
            return
        if self.message_id is None:
            message = await self.channel.send_piece(self._bot(), self.chat_id, current, None, self._kwargs())
            self.message_id = message.message_id
        else:
            try:
                await self._edit(current, None)
            except RetryAfter as exc:
                self.channel.hold_chat(self.chat_id, retry_seconds(exc))
                logger.info("telegram: flood limit while streaming; next edit in %.0fs", retry_seconds(exc))
                return
        self.shown = current

    async def _final(self, text: str) -> None:
        """The formatted end of a reply whose first part is on screen."""
        rest = text[self.start:]
        chunks = [(s, r) for s, r in render_chunks(rest, opener=self.opener) if s.strip()]
        if not chunks:
            return
        (source, rendered), more = chunks[0], chunks[1:]
        if self.message_id is not None and not self._final_on_screen(source, rendered):
            await asyncio.sleep(self.channel.edit_slot(self.chat_id, self.to.is_group))
        await self._complete_message(source, rendered)
        for source, rendered in more:
            await self.channel.send_piece(self._bot(), self.chat_id, source, rendered, self._kwargs())

    async def _complete_message(self, source: str, rendered: str | None) -> None:
        """Give the current message (or a new one) its final, formatted text ``source``."""
        if self.message_id is None:
            await self.channel.send_piece(self._bot(), self.chat_id, source, rendered, self._kwargs())
            self.shown = ""
            return
        if self._final_on_screen(source, rendered):
            rendered = None  # no markup at all: the plain text on screen is already final

        async def edit(text: str, parse_mode: str | None) -> None:
            if parse_mode is not None or text != self.shown:
                await self._edit(text, parse_mode)

        try:
            await send_or_edit_html(edit, source, rendered)
        except BadRequest as exc:  # the message is gone (deleted by the user): send the text anew
            logger.warning("telegram: could not edit a streamed reply (%s); sending it as a new message", exc)
            await self.channel.send_piece(self._bot(), self.chat_id, source, rendered, self._kwargs())
        self.message_id, self.shown = None, ""

    def _final_on_screen(self, source: str, rendered: str | None) -> bool:
        """True when the message already shows ``source`` and formatting would change nothing: no edit
        is needed, so none of the chat's edit slots is taken (in a group a slot is 3 s)."""
        return source == self.shown and (rendered is None or rendered == escape(source))

    # --- calls ---------------------------------------------------------------------------------
    def _bot(self) -> Any:
        bot = self.channel.bot
        if bot is None:
            raise TelegramError("the Telegram channel is stopped")
        return bot

    def _kwargs(self) -> dict[str, Any]:
        """Options of a new message: the topic, and for the reply's first message whom it answers."""
        kwargs = dict(self._base)
        if self._reply is not None:
            kwargs["reply_parameters"], self._reply = self._reply, None
        return kwargs

    async def _edit(self, text: str, parse_mode: str | None) -> None:
        """Edit the current message; "not modified" (the same text again) counts as done."""
        try:
            await self._bot().edit_message_text(text, chat_id=self.chat_id, message_id=self.message_id,
                                                parse_mode=parse_mode)
        except BadRequest as exc:
            if "not modified" not in str(exc).lower():
                raise


__all__ = ["TelegramReplyStream", "FIRST_CHARS", "FIRST_HOLD"]
