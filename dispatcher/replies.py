"""The output side: the fixed replies, the reply prefix, "typing…", streamed replies, and the one error
path's sentence."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from agent.llm import NO_MODEL_HINT
from channels.base import BaseChannel
from config.settings import (
    endpoint_not_found_hint,
    endpoint_refused_hint,
    endpoint_unresolved_hint,
    unknown_model_hint,
)
from core.errors import (
    AuthLLMError,
    EndpointNotFoundError,
    EndpointRefusedError,
    EndpointUnresolvedError,
    ModelNotFoundError,
    NotConfiguredError,
    QuotaLLMError,
    TransientLLMError,
)
from core.messages import RESUMED_QUOTE, IncomingMessage, ReplyStream

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

TEXT_ONLY_REPLY = "I can only read text messages for now. Please type what you would like to say."
ADMIN_ONLY_REPLY = "Sorry, /{command} is for admins only."
PRIVATE_ONLY_REPLY = "Please use /{command} in a private chat with me."
UNKNOWN_COMMAND_REPLY = "Unknown command /{command}. Send /help for the list."
ERROR_REPLY = "Sorry, something went wrong while answering. Your message is saved; please try again."
TRANSIENT_REPLY = ("The model is not responding right now. Your message is saved; "
                   "please try again in a minute.")
AUTH_REPLY = "The model provider rejected the bot's API key. Please ask the bot's admin to check it."
QUOTA_REPLY = ("The model provider's account has run out of quota or credit. Your message is saved; "
               "please ask the bot's admin to check the account.")
STILL_WORKING_REPLY = "Still working on it…"
TYPING_INTERVAL = 4.0
#: After this many seconds without an answer, the user is told the bot is still on it (DESIGN §2.4).
STILL_WORKING_AFTER = 20.0


def reply_prefix(cfg: Config, msg: IncomingMessage) -> str:
    """What goes before a reply to ``msg``: the question a resumed answer answers, quoted, on a channel that
    cannot point at it (dispatcher/resume.py), then the configured prefix for private or group chats."""
    prefix = (cfg.group_chat_reply_prefix if msg.is_group else cfg.single_chat_reply_prefix) or ""
    quote = msg.extra.get(RESUMED_QUOTE)
    return f"{quote}\n\n{prefix}" if quote else prefix


def with_prefix(cfg: Config, msg: IncomingMessage, text: str) -> str:
    """``text`` with :func:`reply_prefix` (no text: none)."""
    return f"{reply_prefix(cfg, msg)}{text}" if text else text


def error_reply(session_id: str, exc: BaseException, cfg: Config) -> str:
    """Log a failed turn (traceback) and return the short sentence the user gets."""
    if isinstance(exc, NotConfiguredError):
        logger.warning("session %s: no model configured", session_id)
        return NO_MODEL_HINT
    logger.error("session %s: turn failed", session_id, exc_info=exc)
    if isinstance(exc, QuotaLLMError):
        logger.error("the model provider's account needs attention (quota, billing): %s", exc)
        return QUOTA_REPLY
    if isinstance(exc, ModelNotFoundError):
        return unknown_model_hint(exc.model or cfg.model, cfg.open_ai_api_base)
    if isinstance(exc, EndpointRefusedError):
        return endpoint_refused_hint(cfg.open_ai_api_base)
    if isinstance(exc, EndpointUnresolvedError):
        return endpoint_unresolved_hint(cfg.open_ai_api_base)
    if isinstance(exc, EndpointNotFoundError):
        return endpoint_not_found_hint(cfg.open_ai_api_base)
    if isinstance(exc, TransientLLMError):
        return TRANSIENT_REPLY
    if isinstance(exc, AuthLLMError):
        return AUTH_REPLY
    return ERROR_REPLY


async def still_working(send: Any, msg: IncomingMessage, after: float, streamed: StreamedReply | None = None,
                        ) -> None:
    """Once ``after`` seconds have passed (unless cancelled first), send the short "still working" note;
    not while an answer is streaming into the chat (its text is the sign of life then)."""
    await asyncio.sleep(after)
    if streamed is not None and streamed.showing:
        return
    try:
        await send(msg, STILL_WORKING_REPLY)
    except Exception as exc:  # noqa: BLE001 - a courtesy note; the answer itself goes through the outbox
        logger.warning("could not send the still-working note to %s:%s: %s", msg.channel, msg.chat_id, exc)


async def keep_typing(channel: BaseChannel | None, msg: IncomingMessage,
                      streamed: StreamedReply | None = None) -> None:
    """Show "typing…" in the chat every few seconds until cancelled; not while an answer streams into
    the chat (the text is the sign of life then), and at once when it stops for tool calls."""
    if channel is None:
        return
    while True:
        if streamed is None or not streamed.showing:
            with contextlib.suppress(Exception):
                await channel.typing(msg)
        if streamed is None:
            await asyncio.sleep(TYPING_INTERVAL)
            continue
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(TYPING_INTERVAL):  # not wait_for: it can swallow the turn's cancel
                await streamed.idle.wait()
        streamed.idle.clear()


class Presence:
    """The signs of life while a message is answered, started and stopped together: "typing…" from entry to
    exit (:func:`keep_typing`), and, once :meth:`still_working` arms it for an agent turn, the "still working"
    note after ``after`` seconds (:func:`still_working`). Leaving cancels both."""

    def __init__(self, channel: BaseChannel | None, msg: IncomingMessage, streamed: StreamedReply | None,
                 send: Any, after: float) -> None:
        self.channel, self.msg, self.streamed, self.send, self.after = channel, msg, streamed, send, after
        self._tasks: list[asyncio.Task] = []

    async def __aenter__(self) -> Presence:
        self._tasks.append(asyncio.create_task(keep_typing(self.channel, self.msg, self.streamed)))
        return self

    def still_working(self) -> None:
        """Send the "still working" note if the answer takes longer than ``after`` seconds."""
        self._tasks.append(asyncio.create_task(still_working(self.send, self.msg, self.after, self.streamed)))

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()


class StreamedReply:
    """The agent's :class:`~agent.loop.AnswerSink` for one reply: pieces go to a channel's
    :class:`~channels.base.ReplyStream` as the whole text so far, with the reply prefix."""

    def __init__(self, stream: ReplyStream, prefix: str = "") -> None:
        self.stream = stream
        self.prefix = prefix
        self._text = ""
        #: true while answer text is in the chat and growing
        self.showing = False
        #: set when the answer stops streaming for tool calls, so "typing…" shows again at once
        self.idle = asyncio.Event()

    async def text(self, piece: str) -> None:
        """A new piece of the answer: push the whole text so far."""
        self._text += piece
        self.showing = True
        await self.stream.push(self.prefix + self._text)

    async def discard(self) -> None:
        """The text so far was not the answer (tool calls follow): leave it, start the answer afresh."""
        self._text = ""
        self.showing = False
        self.idle.set()
        await self.stream.discard()

    async def finish(self, text: str) -> None:
        """Show the final text (prefix and ``after_reply`` hooks applied); empty means no reply."""
        self.showing = False
        if text:
            await self.stream.finish(text)
        else:
            await self.stream.discard()

    async def abort(self) -> None:
        """The turn failed: leave what was shown as it is; the error reply goes as its own message."""
        self.showing = False
        try:
            await self.stream.discard()
        except Exception:  # noqa: BLE001 - the error reply still goes out
            logger.exception("could not close a streamed reply")


def open_stream(channel: BaseChannel | None, cfg: Config, msg: IncomingMessage) -> StreamedReply | None:
    """A streamed reply for an agent turn, when ``stream_replies`` is on and the channel can show one."""
    if channel is None or not cfg.stream_replies:
        return None
    stream = channel.open_stream(msg)
    if stream is None:
        return None
    return StreamedReply(stream, reply_prefix(cfg, msg))
