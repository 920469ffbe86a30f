"""The Telegram channel: python-telegram-bot 22 with a manual lifecycle on the shared event loop.

Polling or webhook, through PTB's standalone pieces and no ``Application``. Polling: an ``Updater`` fills a
queue, and one consumer task turns each update into an :class:`IncomingMessage` and submits it to the
dispatcher synchronously, so updates are taken in arrival order with no task or lock per update; the next
``getUpdates``, whose offset confirms a batch to Telegram, waits until the batch is journalled. Webhook:
our own server (:mod:`channels.telegram.webhook`) answers each post only once its message is journalled.
Measured at Telegram's rate (bench/telegram_intake.py) PTB's ``Application`` costs the same CPU per update
as this path, so the choice is not about speed: nothing is confirmed to Telegram before it is journalled,
with no handler groups or ``CallbackContext`` in between; ordering, concurrency and error isolation are the
dispatcher's job.

Receiving can start and stop apart from the connection (:meth:`TelegramChannel.start_intake`,
:meth:`TelegramChannel.stop_intake`): of several processes on one database, all send, and in polling mode
only the elected one polls.

An update PTB cannot parse (a Bot API change, a broken proxy) is logged once, by id, and skipped; the
updates after it are taken as usual. Messages sent by bots are marked ``is_from_bot`` and so ignored.

Replies are split at Telegram's 4,096-character limit, rendered from Markdown to Telegram HTML, and
resent as plain text when Telegram rejects the markup (:func:`send_or_edit_html`, for sends and edits).
A flood limit (429 ``RetryAfter``) is waited out by python-telegram-bot's ``AIORateLimiter``, which
retries the call after the wait Telegram asked for (:data:`core.retry.FLOOD_LIMIT`) and holds the bot's
other calls meanwhile; a send that still fails is retried by the outbox (``dispatcher/outbox.py``). A
rejected token or an unreachable API leaves the channel inactive with one log line, so the other channels
keep running.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from telegram import BotCommand, Message, ReplyParameters, Update
from telegram.constants import ChatAction
from telegram.error import BadRequest, Forbidden, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.ext import AIORateLimiter, ExtBot, Updater

from channels.base import BaseChannel
from channels.registry import register_channel
from channels.telegram.incoming import MAX_FILE_BYTES, UpdatesRequest, to_incoming
from channels.telegram.request import AiohttpRequest
from channels.telegram.sender import retry_seconds, send_or_edit_html
from channels.telegram.stream import TelegramReplyStream
from channels.telegram.text import MAX_MESSAGE_LENGTH, render_chunks
from channels.telegram.webhook import WebhookServer
from core.messages import RESUMED, IncomingMessage, ReplyStream
from core.retry import FLOOD_LIMIT

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

# Opt in to PTB 23's timedelta durations now: PTB 22.2+ otherwise warns on every flood-control error
# (``RetryAfter``), even from inside its own constructor.
os.environ.setdefault("PTB_TIMEDELTA", "1")

#: Streamed replies: seconds between edits of one chat, in private chats and in groups (Telegram allows
#: about one message a second per chat, and 20 a minute per group).
EDIT_INTERVAL = 1.0
GROUP_EDIT_INTERVAL = 3.0
#: Calls a group may take at once before the pace applies: two replies streaming into one group (or one
#: reply's first message and its final edit) do not queue behind each other, and a minute still stays
#: within about 20 calls.
GROUP_EDIT_BURST = 3
#: A reply longer than this is split and rendered in a worker thread, so other chats are not held up.
RENDER_IN_THREAD_CHARS = 4 * MAX_MESSAGE_LENGTH
#: Seconds a Bot API call other than getUpdates may take (write and read each) before it counts as failed.
SEND_TIMEOUT = 20.0
#: seconds an upload (sendDocument, up to 50 MB) may take
FILE_WRITE_TIMEOUT = 300.0
#: What Telegram accepts as a command name in the menu.
MENU_COMMAND = re.compile(r"[a-z0-9_]{1,32}")
#: Telegram's limit for a command's description in the menu.
MENU_DESCRIPTION_LENGTH = 256
TOKEN_REJECTED = "telegram: the bot token was rejected; check telegram_bot_token / TELEGRAM_BOT_TOKEN"


class MenuCommand(Protocol):
    """A command as the menu shows it."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...


class CommandMenu(Protocol):
    """The commands the menu lists, in order: the dispatcher's ``CommandRegistry``, handed over at construction."""

    def all(self) -> Sequence[MenuCommand]: ...


def menu_commands(registry: CommandMenu) -> list[BotCommand]:
    """The command menu: every command of the command registry that Telegram can show, in its order."""
    menu: list[BotCommand] = []
    for command in registry.all():
        if not MENU_COMMAND.fullmatch(command.name):
            logger.warning("telegram: /%s cannot be in the command menu (a-z, 0-9, _; at most 32)", command.name)
            continue
        description = (command.description or command.name).strip()
        if len(description) > MENU_DESCRIPTION_LENGTH:
            description = description[: MENU_DESCRIPTION_LENGTH - 1] + "…"
        menu.append(BotCommand(command.name, description))
    return menu


def file_url_for(base_url: str) -> str:
    """The ``base_file_url`` matching a ``base_url`` (``.../bot`` -> ``.../file/bot``)."""
    if base_url.endswith("/bot"):
        return base_url[: -len("/bot")] + "/file/bot"
    return base_url.rstrip("/") + "/file/bot"


@register_channel("telegram")
class TelegramChannel(BaseChannel):
    """Telegram through python-telegram-bot, polling or webhook."""

    name = "telegram"

    @classmethod
    def preflight(cls, cfg: Config) -> str | None:
        """Telegram needs a bot token, and webhook mode its public URL."""
        if not cfg.telegram_bot_token:
            return ("telegram_bot_token is empty: get a token from @BotFather and set "
                    "TELEGRAM_BOT_TOKEN or telegram_bot_token in config.json")
        if cfg.telegram_mode == "webhook" and not cfg.telegram_webhook_url:
            return "telegram_mode is webhook but telegram_webhook_url is empty"
        return None

    def __init__(self, config: Config, *, commands: CommandMenu | None = None, poll_timeout: float = 10.0) -> None:
        super().__init__()
        self.config = config
        #: the commands, read into the command menu at start
        self.commands = commands
        self.poll_timeout = poll_timeout
        #: seconds a send, edit or typing call may take before it counts as failed (and is retried)
        self.send_timeout = SEND_TIMEOUT
        #: set while the channel is connected; sends and typing go through it
        self.bot: ExtBot | None = None
        #: set while polling runs
        self.updater: Updater | None = None
        self._consumer: asyncio.Task | None = None
        #: set while the webhook server runs
        self.webhook_server: WebhookServer | None = None
        #: why receiving could not start, the last time it failed
        self.intake_error = ""
        self.active = False
        self.bot_id: int | None = None
        base = (config.telegram_base_url or "https://api.telegram.org/bot").rstrip("/")
        self.base_url = base
        self.base_file_url = file_url_for(base)
        token = config.telegram_bot_token or ""
        #: sent by Telegram with every webhook call, so forged posts are refused
        self.webhook_secret = hashlib.sha256(("webhook:" + token).encode()).hexdigest()[:32]
        #: per chat: the loop time before which no streamed edit goes out (see :meth:`edit_slot`)
        self._next_edit: dict[int, float] = {}

    answered_anywhere = True  # the Bot API takes a reply from any process
    fetches_media = True  # getFile and the file URL (DESIGN §5.1)
    threads_replies = True  # reply_parameters: a resumed answer answers its question (dispatcher/resume.py)

    # --- lifecycle ---------------------------------------------------------------------------
    @property
    def single_receiver(self) -> bool:  # type: ignore[override]
        """Polling: Telegram answers a second concurrent getUpdates with 409, so one process polls."""
        return self.config.telegram_mode != "webhook"

    @property
    def receiving(self) -> bool:
        """True while updates come in (polling runs, or the webhook server listens)."""
        return self.updater is not None or self.webhook_server is not None

    async def start(self, intake: bool = True) -> None:
        """Connect and register the command menu, then (``intake``) start receiving; on failure log one line
        and stay inactive.

        With ``intake=False`` the channel sends but does not receive until :meth:`start_intake`: of several
        processes on one database, only the one elected to poll receives in polling mode.
        """
        cfg = self.config
        problem = self.preflight(cfg)
        if problem:
            logger.error("telegram: %s", problem)
            self.fail(problem)
            return
        bot = self._build_bot()
        try:
            await bot.initialize()  # getMe: checks the token
        except (InvalidToken, Forbidden):
            logger.error(TOKEN_REJECTED)
            self.fail(TOKEN_REJECTED.removeprefix("telegram: "))
            await bot.shutdown()
            return
        except TelegramError as exc:
            logger.error("telegram: cannot reach the Bot API at %s (%s); the channel is inactive", self.base_url, exc)
            await bot.shutdown()
            return
        self.bot = bot
        self.bot_id = bot.id
        self.bot_username = bot.username or ""
        commands = self.commands
        if commands is not None:
            try:
                await bot.set_my_commands(menu_commands(commands))
            except TelegramError as exc:
                logger.warning("telegram: could not register the command menu: %s", exc)
        self.active = True
        logger.info("telegram: connected as @%s (%s)", self.bot_username, cfg.telegram_mode)
        if intake and not await self.start_intake():
            await self.stop()
            self.fail(f"cannot start {cfg.telegram_mode} mode ({self.intake_error})")

    def _build_bot(self) -> ExtBot:
        # Every turn may have its reply and its "typing…" in flight at once (max_concurrent_turns needs a
        # restart, so the pool is sized once).
        pool = max(64, 2 * self.config.max_concurrent_turns)
        request = AiohttpRequest(connection_pool_size=pool, connect_timeout=10, read_timeout=self.send_timeout,
                                 write_timeout=self.send_timeout, pool_timeout=10)
        # Long polls add their own timeout to read_timeout.
        updates_request = UpdatesRequest(connection_pool_size=2, connect_timeout=10, read_timeout=10,
                                         write_timeout=10, pool_timeout=10)
        updates_request.before_poll = self._batch_journalled
        return ExtBot(self.config.telegram_bot_token, base_url=self.base_url, base_file_url=self.base_file_url,
                      request=request, get_updates_request=updates_request, rate_limiter=self._rate_limiter())

    def _rate_limiter(self) -> AIORateLimiter:
        """PTB's limiter: Telegram's pace (``telegram_rate_limit``), and a flood limit's wait honoured and the
        call retried (:data:`core.retry.FLOOD_LIMIT`) either way; a self-hosted server is not paced."""
        retries = FLOOD_LIMIT.attempts - 1
        if self.config.telegram_rate_limit:
            return AIORateLimiter(max_retries=retries)
        return AIORateLimiter(overall_max_rate=0, group_max_rate=0, max_retries=retries)

    async def start_intake(self) -> bool:
        """Start receiving: long polling, or the webhook server and ``setWebhook``. True when it runs; a failure
        is one log line and False (sending goes on)."""
        if self.bot is None:
            logger.error("telegram: cannot receive before the channel is connected")
            return False
        if self.receiving:
            return True
        mode = self.config.telegram_mode
        try:
            if mode == "webhook":
                await self._start_webhook(self.bot)
            else:
                await self._start_polling(self.bot)
        except (TelegramError, OSError) as exc:
            logger.error("telegram: cannot start %s mode: %s; not receiving", mode, exc)
            self.intake_error = str(exc) or type(exc).__name__
            return False
        logger.info("telegram: receiving (%s)", mode)
        return True

    async def _start_polling(self, bot: ExtBot) -> None:
        updates: asyncio.Queue[object] = asyncio.Queue()
        updater = Updater(bot, updates)
        await updater.initialize()  # the bot is initialised already: nothing is called
        # (never updater.shutdown(): it shuts the bot down, and replies still go through it)
        await updater.start_polling(
            timeout=self.poll_timeout, allowed_updates=["message"], drop_pending_updates=False,
            bootstrap_retries=2, error_callback=self._on_poll_error)
        self.updater = updater
        self._consumer = asyncio.create_task(self._consume(updates), name="telegram:updates")

    async def _start_webhook(self, bot: ExtBot) -> None:
        cfg = self.config
        path = urlsplit(cfg.telegram_webhook_url).path.strip("/") or "telegram"
        server = WebhookServer(self, listen=cfg.telegram_webhook_listen, port=cfg.telegram_webhook_port,
                               path=path, secret=self.webhook_secret)
        await server.start()
        try:
            await bot.set_webhook(cfg.telegram_webhook_url, secret_token=self.webhook_secret,
                                  allowed_updates=["message"])
        except BaseException:
            await server.stop()
            raise
        self.webhook_server = server

    async def stop_intake(self) -> None:
        """Stop receiving; sending goes on.

        Polling: the updates fetched so far are handed over and journalled, and only then confirmed to
        Telegram (the offset of one last ``getUpdates``), so a crash cannot lose them. Webhook: the server
        answers the posts in flight and closes. The webhook stays set on purpose, never ``deleteWebhook``:
        with several processes behind one URL the others still serve it, and a lone process that stops is
        sent the waiting updates again when it comes back.
        """
        updater, consumer, server = self.updater, self._consumer, self.webhook_server
        try:
            if server is not None:
                await server.stop()
            if updater is not None and updater.running:
                # The consumer still runs: the last getUpdates waits (before_poll) until it has taken every
                # fetched update and the dispatcher has journalled them, then confirms them.
                await updater.stop()
        finally:
            self.updater, self._consumer, self.webhook_server = None, None, None
            if consumer is not None:
                consumer.cancel()
                await asyncio.gather(consumer, return_exceptions=True)
            if updater is not None:
                # Left over only if confirming failed: hand them over all the same (Telegram sends them again).
                while not updater.update_queue.empty():
                    self._take(updater.update_queue.get_nowait())
            await self.settle_intake()

    async def stop(self) -> None:
        """Stop receiving and disconnect; safe to call twice or after a failed start."""
        try:
            await self.stop_intake()
        finally:
            bot, self.bot = self.bot, None
            self.active = False
            if bot is not None:
                await bot.shutdown()

    def _on_poll_error(self, exc: TelegramError) -> None:
        logger.warning("telegram: polling failed, retrying: %s", exc)

    # --- incoming ----------------------------------------------------------------------------
    async def _batch_journalled(self) -> None:
        """Before the next getUpdates (whose offset confirms the previous batch): the batch is taken and
        journalled, so a crash cannot lose what Telegram will not send again."""
        updater = self.updater
        if updater is not None:
            await updater.update_queue.join()
        # PTB cancels a waiting poll when polling stops; the cancellation must not reach the journal
        # writes this waits for (gathered, they would be cancelled too, and the messages lost): shielded.
        await self.settle_intake()

    async def _consume(self, updates: asyncio.Queue[object]) -> None:
        """Take the updates in the order the updater queued them."""
        while True:
            update = await updates.get()
            try:
                self._take(update)
            finally:
                updates.task_done()

    def _take(self, update: object) -> None:
        """Hand one update's message to the dispatcher; a failure is logged and the next update goes on."""
        try:
            message = update.message if isinstance(update, Update) else None
            incoming = self.to_incoming(message) if message is not None else None
            if incoming is not None:
                self.deliver_nowait(incoming)
        except Exception:  # noqa: BLE001 - one bad update must not stop the channel
            logger.exception("telegram: error while handling update %s", getattr(update, "update_id", "?"))

    def to_incoming(self, message: Message) -> IncomingMessage | None:
        """Turn a PTB message into an :class:`IncomingMessage`, or None for a service message."""
        return to_incoming(message, channel=self.name, bot_id=self.bot_id, bot_username=self.bot_username)

    async def download(self, msg: IncomingMessage) -> bytes | None:
        """The photo or voice note's bytes: ``getFile``, then the file from ``/file/bot<token>/<file_path>``."""
        bot = self.bot
        file_id = msg.extra.get("file_id")
        if bot is None or not file_id:
            return None
        size = int(msg.extra.get("file_size") or 0)
        if size > MAX_FILE_BYTES:
            raise ValueError(f"the file is {size:,} bytes; the Bot API serves at most {MAX_FILE_BYTES:,}")
        file = await bot.get_file(str(file_id), read_timeout=self.send_timeout)
        return bytes(await file.download_as_bytearray(read_timeout=60))

    # --- outgoing ----------------------------------------------------------------------------
    async def send(self, to: IncomingMessage, text: str) -> None:
        """Send ``text`` as one or more messages, as HTML where Telegram accepts it, else as plain text."""
        bot = self.bot
        if bot is None:
            logger.warning("telegram: inactive; reply to %s dropped", to.chat_id)
            return
        chat_id = int(to.chat_id)
        base, reply = self.send_options(to)
        if len(text) > RENDER_IN_THREAD_CHARS:
            chunks = await asyncio.to_thread(render_chunks, text)
        else:
            chunks = render_chunks(text)
        for source, rendered in chunks:
            if not source.strip():
                continue
            kwargs = dict(base)
            if reply is not None:
                kwargs["reply_parameters"], reply = reply, None
            await self.send_piece(bot, chat_id, source, rendered, kwargs)

    def send_options(self, to: IncomingMessage) -> tuple[dict[str, Any], ReplyParameters | None]:
        """The topic of a reply to ``to``, and in groups whom its first message answers."""
        base: dict[str, Any] = {}
        if to.extra.get("thread_id"):
            base["message_thread_id"] = int(to.extra["thread_id"])
        return base, _reply_parameters(to)

    async def send_piece(self, bot: ExtBot, chat_id: int, source: str, rendered: str | None,
                         kwargs: dict[str, Any]) -> Message:
        """Send one message: as HTML when ``rendered`` is given and Telegram takes it, else ``source`` plain."""

        async def send(text: str, parse_mode: str | None) -> Message:
            try:
                return await bot.send_message(chat_id, text, parse_mode=parse_mode, **kwargs)
            except BadRequest as exc:  # the message to answer is gone: send it without the reference
                if "reply" not in str(exc).lower() or "reply_parameters" not in kwargs:
                    raise
            plain = {k: v for k, v in kwargs.items() if k != "reply_parameters"}
            return await bot.send_message(chat_id, text, parse_mode=parse_mode, **plain)

        return await send_or_edit_html(send, source, rendered)

    #: the Bot API's upload limit for bots (multipart/form-data), 50 MB
    max_file_bytes = 50 * 1000 * 1000

    async def send_file(self, to: IncomingMessage, path: Path, *, filename: str, caption: str = "") -> None:
        """Send a file as a document (``sendDocument``, multipart), answering ``to`` in a group."""
        bot = self.bot
        if bot is None:
            raise RuntimeError("telegram: inactive; the file was not sent")
        base, reply = self.send_options(to)
        data = await asyncio.to_thread(path.read_bytes)  # PTB reads an upload whole anyway
        kwargs: dict[str, Any] = dict(base)
        if reply is not None:
            kwargs["reply_parameters"] = reply
        # An upload of up to 50 MB may take a while on a slow link: the write timeout bounds the whole request.
        await bot.send_document(int(to.chat_id), document=data, filename=filename, caption=caption or None,
                                write_timeout=FILE_WRITE_TIMEOUT, read_timeout=FILE_WRITE_TIMEOUT, **kwargs)

    # --- streamed replies ----------------------------------------------------------------------
    def open_stream(self, to: IncomingMessage) -> ReplyStream | None:
        """A reply that is sent at its first words and then edited in place (see :mod:`channels.telegram.stream`)."""
        if self.bot is None:
            return None
        return TelegramReplyStream(self, to)

    def edit_slot(self, chat_id: int, is_group: bool) -> float:
        """Reserve the chat's next edit: seconds to wait for it. Edits of every reply in a chat share one
        pace, so two replies streaming into one group stay inside its flood limit together."""
        # A generic cell-rate limiter: _next_edit holds the chat's theoretical time of the next call; up to
        # `burst` calls may be that far ahead of now. Not PTB's AIORateLimiter: it waits inside each Bot API
        # call (the pump must wait *before* it takes the text, so an edit shows the latest words), paces only
        # the bot overall and groups (no per-chat pace in private chats), and is off with telegram_rate_limit
        # false. Not aiolimiter.AsyncLimiter per chat either: a flood limit's retry_after must push the chat's
        # next slot later (hold_chat) and a send must count without waiting, which it has no public way to do.
        now = asyncio.get_running_loop().time()
        interval, burst = (GROUP_EDIT_INTERVAL, GROUP_EDIT_BURST) if is_group else (EDIT_INTERVAL, 1)
        due = max(now, self._next_edit.get(chat_id, 0.0))
        at = max(now, due - (burst - 1) * interval)
        self._next_edit[chat_id] = due + interval
        if len(self._next_edit) > 10_000:  # forget chats whose slots have passed
            self._next_edit = {c: t for c, t in self._next_edit.items() if t > now}
        return at - now

    def hold_chat(self, chat_id: int, seconds: float) -> None:
        """Telegram asked to wait (``RetryAfter``): no edit in this chat before then."""
        until = asyncio.get_running_loop().time() + seconds
        self._next_edit[chat_id] = max(self._next_edit.get(chat_id, 0.0), until)

    def retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        """A flood limit waits its ``retry_after``; a network error, timeout or 5xx is retried; a refusal
        (bad request, blocked by the user, a rejected token) is not."""
        if isinstance(exc, RetryAfter):
            return retry_seconds(exc)
        if isinstance(exc, (BadRequest, Forbidden, InvalidToken)):  # BadRequest is a NetworkError too
            return None
        if isinstance(exc, NetworkError):
            return 0.0
        return super().retry_delay(exc, attempt)

    async def typing(self, to: IncomingMessage) -> None:
        """Show "typing…" in the chat; errors are ignored."""
        bot = self.bot
        if bot is None:
            return
        thread = int(to.extra["thread_id"]) if to.extra.get("thread_id") else None
        try:
            await bot.send_chat_action(int(to.chat_id), ChatAction.TYPING, message_thread_id=thread)
        except (TelegramError, ValueError) as exc:
            logger.debug("telegram: typing action failed: %s", exc)


def _reply_parameters(to: IncomingMessage) -> ReplyParameters | None:
    """In groups, the first chunk answers the triggering message, so it is clear whom the bot answers; so does a
    resumed answer (crash resume), so it is clear which question it answers."""
    if not (to.is_group or to.extra.get(RESUMED)) or ":" not in to.message_id:
        return None
    try:
        message_id = int(to.message_id.rsplit(":", 1)[1])
    except ValueError:
        return None
    return ReplyParameters(message_id=message_id, allow_sending_without_reply=True)

