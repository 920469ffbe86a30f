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
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from core.messages import IncomingMessage, MessageHandler, MessageSubmitter, ReplyStream

if TYPE_CHECKING:
    from pydantic import BaseModel

    from config.settings import Config

logger = logging.getLogger(__name__)


class BaseChannel(ABC):
    """A messaging platform the bot talks on."""

    #: the channel name used in session ids and admin entries ("terminal", "telegram", ...)
    name: str = ""
    #: the bot's own user name on the platform, for /cmd@botname and @mentions, once known
    bot_username: str = ""
    #: every message on this channel comes from whoever runs the bot (the local terminal): an admin
    operator_only: bool = False
    #: a third-party channel's own settings, a pydantic model: read from ``plugins.<name>`` in config.json,
    #: validated before start, and passed to the channel's constructor as ``settings`` (built-in channels
    #: keep their flat keys of DESIGN §1.2)
    Settings: ClassVar[type[BaseModel] | None] = None

    @property
    def login_qr(self) -> str | None:
        """The login QR code the operator must scan now (an image ``data:`` URL), or None (the web console
        shows it)."""
        return None

    @property
    def login_question(self) -> str | None:
        """What the login asks the operator to type now (WeChat's number shown on the phone), or None (the web
        console shows a form for it and hands the answer to :meth:`answer_login`)."""
        return None

    def answer_login(self, answer: str) -> bool:
        """The operator's answer to :attr:`login_question`; False when none is asked or the answer is blank."""
        return False

    @classmethod
    def owns_terminal(cls, cfg: Config) -> bool:
        """This channel draws on the operator's terminal when run with ``cfg`` (a chat window, a login QR code):
        log lines below WARNING then stay in bot.log, off the screen."""
        return False

    @classmethod
    def preflight(cls, cfg: Config) -> str | None:
        """Why this channel cannot run with ``cfg`` (one line, e.g. a missing token), checked at start before
        anything connects; None when it can try. Nothing may be connected or sent here."""
        return None

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
    async def start(self, intake: bool = True) -> None:
        """Connect and start receiving messages. Returns once receiving runs in the background.

        With ``intake`` False (a :attr:`single_receiver` channel among several processes), connect only:
        receiving starts at :meth:`start_intake`.
        """

    #: photos and voice notes of this channel are fetched with :meth:`download` and given to the model (DESIGN
    #: §5.1); False: they get the short "text only" note, as stickers and other files do
    fetches_media: bool = False
    #: True when a reply can point at the message it answers (Telegram's reply_parameters): a resumed answer
    #: then answers the question itself; other channels quote the question above the answer (issue 40)
    threads_replies: bool = False

    async def download(self, msg: IncomingMessage) -> bytes | None:
        """The bytes of the photo or voice note ``msg`` carries, fetched from the platform (DESIGN §5.1); None
        when this channel cannot fetch media (the user gets a short note). Raises when the platform fails."""
        return None

    async def start_intake(self) -> bool:
        """Start receiving after ``start(intake=False)``; True when it runs. Only single receivers need it."""
        return True

    async def stop_intake(self) -> None:  # noqa: B027 - a default that does nothing, not an abstract method
        """Stop receiving; sending goes on. Only single receivers need it."""

    async def settle_intake(self) -> None:
        """Wait until every message handed over is journalled (``intake_settled``), shielded: a cancelled
        stop still lets the journal finish. Await it before confirming messages to the platform."""
        if self.intake_settled is not None:
            await asyncio.shield(self.intake_settled())

    @abstractmethod
    async def stop(self) -> None:
        """Stop receiving and disconnect."""

    @abstractmethod
    async def send(self, to: IncomingMessage, text: str) -> None:
        """Send a reply to the chat that ``to`` came from."""

    def open_stream(self, to: IncomingMessage) -> ReplyStream | None:
        """A stream for one reply to ``to``, or None when this channel sends whole answers only."""
        return None

    #: the largest file :meth:`send_file` sends, in bytes; 0 (the default) when the channel sends no files
    #: (``/export`` then writes the file under ``<data_dir>/exports/`` and answers with its path)
    max_file_bytes: int = 0

    async def send_file(self, to: IncomingMessage, path: Path, *, filename: str, caption: str = "") -> None:
        """Send the file at ``path`` as a document named ``filename`` to the chat ``to`` came from. Only
        called when :attr:`max_file_bytes` is set and the file is no larger; raises when it was not sent."""
        raise NotImplementedError(f"channel {self.name} sends no files")

    def retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        """After :meth:`send` raised ``exc``: None when retrying cannot help, else the least wait in seconds
        before the next try (0: the caller's backoff decides; more: the platform asked for it)."""
        return 0.0 if isinstance(exc, (OSError, TimeoutError)) else None

    async def typing(self, to: IncomingMessage) -> None:  # noqa: B027 - optional hook
        """Show that a reply is being prepared, where the platform supports it."""

    async def wait_closed(self) -> None:  # noqa: B027 - optional hook
        """Wait until the channel has nothing more to receive (the terminal's EOF)."""

    async def forget_chat(self, chat_id: str) -> None:  # noqa: B027 - optional hook
        """/forget: delete what the channel itself keeps of a chat (the terminal's line history)."""

    def ignored(self, message: IncomingMessage, reason: str) -> None:  # noqa: B027 - optional hook
        """The bot does not act on ``message``, for ``reason`` (a configured trigger was not met): the
        terminal says so, a chat platform stays silent (the dispatcher logs it at DEBUG)."""

    @property
    def finite(self) -> bool:
        """True when the channel ends by itself (the terminal at EOF), so the app may exit."""
        return False
