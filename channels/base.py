"""The platform-neutral boundary: one incoming event type and one channel base class.

Nothing platform-specific crosses this boundary. A channel turns platform events into
:class:`IncomingMessage` values, hands them to the dispatcher, and sends replies through
:meth:`BaseChannel.send`.

A channel hands a message over in one of two ways. :meth:`BaseChannel.deliver` awaits the receiver
(the dispatcher's ``handle`` returns once the message is journalled). :meth:`BaseChannel.deliver_nowait`
returns at once: the dispatcher's ``submit`` queues the message synchronously, in arrival order, so a
channel needs no task or lock per message to keep a chat's messages in order.

A channel that can show an answer while it is generated returns a :class:`ReplyStream` from
:meth:`BaseChannel.open_stream`; the default None means it sends whole answers (WeChat, piped terminal).
"""

from __future__ import annotations

import asyncio
import logging
import re
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

logger = logging.getLogger(__name__)


def _utcnow() -> datetime:
    return datetime.now(UTC)


#: What no text may carry past the edge: lone UTF-16 surrogates (they cannot be encoded, so every later
#: request with them fails) and NUL (PostgreSQL text and its JSON operators refuse it).
_INVALID = re.compile("[\x00\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` made valid: lone surrogates become U+FFFD, NUL characters are dropped."""
    if not _INVALID.search(text):
        return text
    return _INVALID.sub(lambda m: "" if m.group() == "\x00" else "\ufffd", text)


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """One message from a platform, as the dispatcher sees it."""

    channel: str
    chat_id: str
    user_id: str
    text: str
    user_name: str = ""
    is_group: bool = False
    group_name: str = ""
    mentions_bot: bool = False
    reply_to_bot: bool = False
    message_id: str = ""
    time: datetime = field(default_factory=_utcnow)
    content_type: str = "text"  # "text", or what the platform sent instead ("sticker", "photo", ...)
    is_from_bot: bool = False
    #: the text and author of the message this one replies to, when that is someone else's
    reply_to_text: str = ""
    reply_to_name: str = ""
    #: channel-private routing data needed to answer later (e.g. WeChat's per-login UserName).
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Made valid at the edge: one bad character must not lose the message or break the chat for good.
        for name in ("text", "user_name", "group_name"):
            value = getattr(self, name)
            if isinstance(value, str):
                cleaned = clean_text(value)
                if cleaned is not value:
                    object.__setattr__(self, name, cleaned)

    def to_json(self) -> dict[str, Any]:
        """Serialise, so an unanswered message can be answered after a restart."""
        # (not dataclasses.asdict: it deep-copies every value, and these are plain strings and a dict)
        data = {name: getattr(self, name) for name in _FIELD_NAMES}
        data["time"] = self.time.isoformat()
        data["extra"] = dict(self.extra)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> IncomingMessage:
        """Rebuild a message stored with :meth:`to_json`."""
        data = dict(data)
        data["time"] = datetime.fromisoformat(data["time"])
        return cls(**data)


_FIELD_NAMES = tuple(f.name for f in fields(IncomingMessage))

#: What a channel calls for every incoming message; False means it was not journalled (None counts as taken).
MessageHandler = Callable[[IncomingMessage], Awaitable[bool | None]]
#: The synchronous counterpart: takes the message in arrival order and returns at once.
MessageSubmitter = Callable[[IncomingMessage], None]


class ReplyStream(ABC):
    """One reply written into the chat while the model generates it (``stream_replies``).

    The dispatcher pushes the whole answer so far (reply prefix included) as it grows, and ends every
    stream with exactly one :meth:`finish` or :meth:`discard`. The channel decides how often to show it
    (throttling is its business, so :meth:`push` returns at once).
    """

    @abstractmethod
    async def push(self, text: str) -> None:
        """The answer so far: the whole text, not a delta. Returns without waiting for the platform."""

    @abstractmethod
    async def discard(self) -> None:
        """What was pushed is not the answer (the model went on to call tools, or the turn failed).

        What the user already saw stays, completed to the last pushed text; a later push starts a new
        message, and anything not shown yet is dropped.
        """

    @abstractmethod
    async def finish(self, text: str) -> None:
        """Show exactly ``text`` as the final answer (after ``after_reply`` hooks); send it whole when
        nothing was shown yet. Raises like :meth:`BaseChannel.send` when the platform refuses it."""


class BaseChannel(ABC):
    """A messaging platform the bot talks on."""

    #: the channel name used in session ids and admin entries ("terminal", "telegram", ...)
    name: str = ""
    #: the bot's own user name on the platform, for /cmd@botname and @mentions, once known
    bot_username: str = ""

    def __init__(self) -> None:
        self._handler: MessageHandler | None = None
        self._submitter: MessageSubmitter | None = None
        #: without a submitter: per chat, the messages waiting for :meth:`deliver`, head first
        self._backlog: dict[str, deque[IncomingMessage]] = {}
        self._backlog_tasks: set[asyncio.Task] = set()
        #: set by the dispatcher: waits until every message handed over is journalled (see
        #: ``Dispatcher.intake_settled``); a channel awaits it before confirming messages to its platform
        self.intake_settled: Callable[[], Awaitable[None]] | None = None
        #: why the channel cannot run any more (see :meth:`fail`); None while it can
        self.failure: str | None = None
        #: set by :meth:`fail`; the app stops when every channel's is set
        self.failed = asyncio.Event()

    def fail(self, reason: str) -> None:
        """The channel cannot run any more (a rejected token, a login that failed for good); ``reason`` says
        why in one line. Call it on the event loop. When no channel can run, the app exits with the reasons."""
        self.failure = reason
        self.failed.set()

    def set_handler(self, handler: MessageHandler, submit: MessageSubmitter | None = None) -> None:
        """Set the coroutine that receives every incoming message, and optionally its synchronous counterpart."""
        self._handler = handler
        self._submitter = submit

    async def deliver(self, message: IncomingMessage) -> bool:
        """Hand one message to the dispatcher and wait until it is taken: True once it is journalled (or needs
        no journal), False when it is not (no receiver, or the database refused it)."""
        if self._handler is None:
            logger.warning("channel %s has no handler; message dropped", self.name)
            return False
        return await self._handler(message) is not False

    def deliver_nowait(self, message: IncomingMessage) -> None:
        """Hand one message over without waiting; a chat's messages are taken in arrival order."""
        if self._submitter is not None:
            self._submitter(message)
            return
        # No synchronous receiver: await the handler, one message of a chat at a time, so a slow
        # message cannot be overtaken by a later one of the same chat, nor hold up other chats.
        backlog = self._backlog.get(message.chat_id)
        if backlog is not None:
            backlog.append(message)
            return
        self._backlog[message.chat_id] = deque((message,))
        task = asyncio.create_task(self._deliver_backlog(message.chat_id), name=f"{self.name}:deliver")
        self._backlog_tasks.add(task)
        task.add_done_callback(self._backlog_tasks.discard)

    async def _deliver_backlog(self, chat_id: str) -> None:
        backlog = self._backlog[chat_id]
        try:
            while backlog:
                try:
                    await self.deliver(backlog[0])
                except Exception:  # noqa: BLE001 - one failed message must not stop the chat's others
                    logger.exception("channel %s: could not deliver a message of chat %s", self.name, chat_id)
                backlog.popleft()
        finally:
            del self._backlog[chat_id]

    #: only one process at a time may receive (Telegram's getUpdates): with several processes on one
    #: database, such a channel starts without receiving (``start(intake=False)``) and the elected leader
    #: calls :meth:`start_intake` / :meth:`stop_intake` (DESIGN §10)
    single_receiver: bool = False
    #: any process on the database can send this channel's replies (Telegram: the Bot API), so with several
    #: processes its messages are answered by whichever holds the session (dispatcher/claims.py); False for
    #: a terminal or a WeChat login, whose replies only the process that received them can send
    answered_anywhere: bool = False

    @abstractmethod
    async def start(self) -> None:
        """Connect and start receiving messages. Returns once receiving runs in the background."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop receiving and disconnect."""

    @abstractmethod
    async def send(self, to: IncomingMessage, text: str) -> None:
        """Send a reply to the chat that ``to`` came from."""

    def open_stream(self, to: IncomingMessage) -> ReplyStream | None:
        """A stream for one reply to ``to``, or None when this channel sends whole answers only."""
        return None

    def retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        """After :meth:`send` raised ``exc``: None when retrying cannot help, else the least wait in seconds
        before the next try (0: the caller's backoff decides; more: the platform asked for it)."""
        return 0.0 if isinstance(exc, (OSError, TimeoutError)) else None

    async def typing(self, to: IncomingMessage) -> None:  # noqa: B027 - optional hook
        """Show that a reply is being prepared, where the platform supports it."""

    async def wait_closed(self) -> None:  # noqa: B027 - optional hook
        """Wait until the channel has nothing more to receive (the terminal's EOF)."""

    @property
    def finite(self) -> bool:
        """True when the channel ends by itself (the terminal at EOF), so the app may exit."""
        return False
