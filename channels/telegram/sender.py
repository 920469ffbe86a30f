"""What a streamed reply needs of the Telegram channel (:class:`Sender`), and the two call helpers both use.

:class:`~channels.telegram.stream.TelegramReplyStream` is written against :class:`Sender`, which
:class:`~channels.telegram.channel.TelegramChannel` implements, so the stream does not import the channel and the
channel makes streams without a lazy import.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from telegram import Message, ReplyParameters
from telegram.constants import ParseMode
from telegram.error import BadRequest, RetryAfter
from telegram.ext import ExtBot
from telegram.warnings import PTBDeprecationWarning

from core.messages import IncomingMessage

logger = logging.getLogger("channels.telegram.channel")  # the lines these helpers log read as the channel's
T = TypeVar("T")


class Sender(Protocol):
    """The channel's calls a streamed reply makes, and its per-chat edit pace."""

    #: the connected bot, None once the channel stopped
    bot: ExtBot | None

    def send_options(self, to: IncomingMessage) -> tuple[dict[str, Any], ReplyParameters | None]: ...

    async def send(self, to: IncomingMessage, text: str) -> None: ...

    async def send_piece(self, bot: ExtBot, chat_id: int, source: str, rendered: str | None,
                         kwargs: dict[str, Any]) -> Message: ...

    def edit_slot(self, chat_id: int, is_group: bool) -> float: ...

    def hold_chat(self, chat_id: int, seconds: float) -> None: ...


async def send_or_edit_html(call: Callable[[str, str | None], Awaitable[T]], source: str,
                            rendered: str | None) -> T:
    """``call(rendered, HTML)``; when there is no ``rendered`` HTML or Telegram rejects its markup,
    ``call(source, None)``: the text as plain text. Used for new messages and for edits alike."""
    if rendered is not None:
        try:
            return await call(rendered, ParseMode.HTML)
        except BadRequest as exc:
            if "parse entities" not in str(exc).lower():
                raise
            logger.warning("telegram: markup rejected (%s); sending plain text", exc)
    return await call(source, None)


def retry_seconds(exc: RetryAfter) -> float:
    """``RetryAfter.retry_after`` in seconds (an int today, a timedelta in PTB 23), without the warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        delay = exc.retry_after
    return delay.total_seconds() if isinstance(delay, timedelta) else float(delay)


__all__ = ["Sender", "retry_seconds", "send_or_edit_html"]
