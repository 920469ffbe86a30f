"""The weixin channel: WeChat's official bot API (ClawBot / iLink) on the shared event loop.

One background task does everything that receives: the QR login when no login is kept (or WeChat ended it),
then the long poll. Each batch is handed to the dispatcher in order, and only once every message of it is
journalled (``intake_settled``) is the batch's cursor saved to ``data_dir``. So a restart or a ``kill -9``
cannot lose a message: the worst case is a crash between the journal and the cursor, after which the old
cursor fetches the batch again, and the journal's unique ``(channel, message_id)`` makes that redelivery a
duplicate that is not answered twice. The cursor is a file beside the bot token rather than a column written
in the journal's transaction: it belongs to one login (deleted with it), the journal is the dispatcher's and
shared by every channel, and redelivery is idempotent anyway; nothing is answered before it is journalled.

Replies go out whole (WeChat cannot edit a sent message), split at the API's 4,000 characters, each piece with
a fresh ``client_id`` and the newest ``context_token`` of the user (as the plugin does: a token allows about 10
replies, within about 24 hours of the user's last message), kept with the cursor so every process sends with
it. Each piece goes out once: when a later piece fails (a 5xx), the outbox's retry goes on
from that piece, not from the first. ``ret -2`` on a piece longer than :data:`MIN_PIECE` makes the pieces
shorter (half, down to :data:`MIN_PIECE`; the length that went through is kept for later replies); ``ret -2`` on
a short one means the token is used up or too old: what is left of that reply or reminder is kept in
``weixin_held/`` with one log line, and sent when the user next writes (a new token) — never dropped, never
retried in a loop. "typing…" uses the API's typing ticket. The receive loop tells WeChat it starts and stops
(``notifystart``/``notifystop``); its network failures are retried under :data:`core.retry.RECEIVE` with one log
line when the API cannot be reached and one when it can again; errcode -14 is one log line and a new QR code.

A photo or voice message keeps its CDN reference in ``IncomingMessage.extra`` (journalled with it, so a restart
can still fetch it); :meth:`WeixinChannel.download` fetches and decrypts it when its turn comes. A voice message
carries WeChat's own transcript when WeChat made one, and that is what the bot reads (its SILK audio is no
format transcription models take).

With several processes on one PostgreSQL database (DESIGN §10) and one shared ``data_dir``, only the elected
process logs in and polls (``single_receiver``), and any process can send a reply (``answered_anywhere``): it
reads the login from ``data_dir``, so a process that dies mid-turn is taken over like on Telegram.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from channels.base import BaseChannel
from channels.registry import register_channel
from channels.weixin.client import (
    CDN_BASE_URL,
    LONG_POLL_S,
    TYPING_CANCEL,
    ILinkClient,
    ILinkError,
    ILinkHTTPError,
    SendRefused,
    SessionExpired,
)
from channels.weixin.held import HeldReplies
from channels.weixin.incoming import to_incoming
from channels.weixin.login import LoginFailed, LoginFiles, LoginFlow, LoginState, QrLogin
from channels.weixin.text import MESSAGE_LIMIT, take_piece
from core.errors import BotError
from core.messages import IncomingMessage
from core.retry import RECEIVE, RetryPolicy, no_hint

if TYPE_CHECKING:
    from tenacity import RetryCallState

    from config.settings import Config

logger = logging.getLogger(__name__)

#: the largest photo or voice message fetched from the CDN
MAX_MEDIA_BYTES = 20 * 1000 * 1000
#: ``ret -2`` on a piece longer than this makes the pieces shorter; on one this short, the token is refused
MIN_PIECE = 1000
#: the content type of a reminder's journal row (reminders/firing.py)
REMINDER = "reminder"
#: replies whose later pieces are still to go (an outbox retry goes on from there): at most this many are kept
UNSENT_KEPT = 256
#: a typing ticket is good for about a day; fetch a new one after this many seconds
TICKET_TTL_S = 12 * 3600.0
NETWORK_ERRORS = (aiohttp.ClientError, OSError, TimeoutError, ILinkHTTPError)


class NotLoggedIn(BotError):
    """A reply cannot go out yet: no login (the QR code waits to be scanned)."""


@register_channel("weixin")
class WeixinChannel(BaseChannel):
    """WeChat through its official bot API: QR login, long poll, replies with the user's newest context token."""

    name = "weixin"

    def __init__(self, config: Config, window: Callable[[str], str] | None = None) -> None:
        super().__init__()
        self.config = config
        #: ``window(model)`` describes the model's window, for the terminal banner (channels/registry.py)
        self.window = window
        self.files = LoginFiles(Path(config.data_dir))
        self.base_url = (config.weixin_base_url or "https://ilinkai.weixin.qq.com").rstrip("/")
        #: the kept login, or the QR login that gets one, and the number the phone shows
        self.login_flow = LoginFlow(self.files, self.base_url, terminal=lambda: self.terminal,
                                    console=lambda: bool(self.config.web_console_port))
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task | None = None
        #: the API with the current login's token (None while logging in)
        self.client: ILinkClient | None = None
        self.cursor = ""
        #: seconds the server holds a long poll
        self.hold_s = LONG_POLL_S
        self._tickets: dict[str, tuple[str, float]] = {}
        #: the longest piece sent; shorter once WeChat refused a longer one (``ret -2`` "prepare failed")
        self.piece_limit = MESSAGE_LIMIT
        #: per reply (message, text): what is still to be sent after the pieces that went out
        self._unsent: dict[tuple[str, str, str], str] = {}
        #: user -> (newest context token, when it came) (kept with the cursor)
        self._tokens: dict[str, tuple[str, float]] = {}
        #: (mtime, size) of the cursor file when its tokens were last read
        self._tokens_seen: tuple[int, int] | None = None
        #: replies and reminders WeChat refused for the token, until the user writes again
        self.held = HeldReplies(self.files.data_dir)
        self._held_tasks: set[asyncio.Task] = set()
        self._notified = False
        #: see :attr:`terminal` (decided at start)
        self._terminal: bool | None = None

    @property
    def login(self) -> QrLogin | None:
        """The QR login in progress, or the last one (:attr:`LoginFlow.qr`)."""
        return self.login_flow.qr

    @property
    def login_qr(self) -> str | None:
        """The login QR code as an SVG ``data:`` URL while a scan is needed (the web console shows it)."""
        return None if self.client is not None else self.login_flow.qr_svg()

    @property
    def login_state(self) -> LoginState:
        """Where the login stands: confirmed while a token is in use."""
        return LoginState.CONFIRMED if self.client is not None else self.login_flow.state

    @classmethod
    def owns_terminal(cls, cfg: Config) -> bool:
        """The only channel: its login (the QR code, the number to type) is the operator's terminal's business."""
        return cfg.channels == ["weixin"]

    @property
    def terminal(self) -> bool:
        """The operator watches this process's terminal and no other channel reads it: the banner, the QR code
        with one plain instruction line, and the verify code typed there."""
        if self._terminal is None:
            from channels.terminal import screen_is_ours

            self._terminal = screen_is_ours(self.config)
        return self._terminal

    def _banner(self) -> None:
        from channels.terminal import start_banner

        window = ""
        if self.window is not None and self.config.model_configured:
            window = self.window(self.config.model)
        hint = ("WeChat: logged in; the bot answers messages sent to it. Ctrl-C stops." if self.client is not None
                else "WeChat: not logged in yet; scan the QR code below. Ctrl-C stops.")
        print(start_banner(self.config, window=window, hint=hint), flush=True)  # noqa: T201 - the start banner

    # --- lifecycle ------------------------------------------------------------------------------
    #: how the receive loop retries a long poll or a login that cannot reach WeChat
    receive_retry: RetryPolicy = RECEIVE
    #: one process polls a login (several processes on one database: the elected one, DESIGN §10)
    single_receiver = True
    #: any process can reply: the login is read from the shared ``data_dir`` when a reply goes out
    answered_anywhere = True

    async def start(self, intake: bool = True) -> None:
        """Connect with the kept login, if any (replies can go out at once), then (``intake``) start logging in
        when needed and receiving, in the background; returns at once."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
            self._use_kept_login()
            if self.terminal:
                self._banner()
        if intake:
            await self.start_intake()

    async def start_intake(self) -> bool:
        """Start the background task that logs in when needed and polls."""
        if self._task is None:
            self._load_tokens()  # what the process that received before kept
            self._task = asyncio.create_task(self._run_logged(), name="weixin:receive")
        return True

    async def stop_intake(self) -> None:
        """Stop receiving; what was fetched is journalled first (its cursor may stay unsaved: fetched again
        at the next start, and not answered twice)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.settle_intake()
        held, self._held_tasks = self._held_tasks, set()
        for pending in held:
            pending.cancel()
        await asyncio.gather(*held, return_exceptions=True)
        if self._notified:
            self._notified = False
            await self._notify("notifystop")

    async def stop(self) -> None:
        """Stop receiving and close the connection."""
        try:
            await self.stop_intake()
        finally:
            session, self._session = self._session, None
            self.client = None
            if session is not None:
                await session.close()

    def _use_kept_login(self) -> bool:
        """Use the login kept in ``data_dir`` (True), if there is one."""
        client = self.login_flow.kept(self._session) if self._session is not None else None
        if client is None:
            return False
        self.client = client
        return True

    async def _run_logged(self) -> None:
        try:
            await self._run()
        except Exception as exc:  # noqa: BLE001 - a bug here must not take the other channels down
            logger.exception("weixin: receiving stopped")
            self.fail(f"receiving stopped by {type(exc).__name__}: {exc}")

    async def _run(self) -> None:
        """Log in when needed, then poll; WeChat ending the session starts a new login."""
        assert self._session is not None
        while True:
            if self.client is None and not self._use_kept_login():
                self.client = await self.login_flow.log_in(self._session, self._reaching)
            self.cursor = self.files.load_cursor()
            try:
                await self._poll()
            except SessionExpired:
                logger.warning("weixin: WeChat ended the session (errcode -14); a new QR code follows, "
                               "scan it to log in again")
                self.files.forget_account()
                self.client, self._tickets, self._notified = None, {}, False

    async def _reaching(self, call: Any, *args: Any) -> Any:
        """``await call(*args)``, retried under :attr:`receive_retry` while WeChat cannot be reached or answers
        with an error: one WARNING line when the first try fails, one INFO line when a try goes through again."""
        failed = False

        def waiting(state: RetryCallState) -> None:
            nonlocal failed
            exc = state.outcome.exception() if state.outcome is not None else None
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if not failed:
                logger.warning("weixin: WeChat's bot API at %s does not answer (%s); retrying in the background, "
                               "the other channels keep running", self.base_url, reason)
            else:
                logger.debug("weixin: still failing (%s); next try in %.0f s", reason, state.upcoming_sleep)
            failed = True

        def passing(exc: BaseException) -> bool:
            return isinstance(exc, (*NETWORK_ERRORS, ILinkError)) and not isinstance(exc, SessionExpired | LoginFailed)

        result = await self.receive_retry.call(call, *args, retry_on=passing, hint=no_hint, before_sleep=waiting)
        if failed:
            logger.info("weixin: WeChat's bot API answers again")
        return result

    async def _notify(self, event: str) -> None:
        """``notifystart`` / ``notifystop`` as the plugin calls them: a failure or a non-zero ret is one line, and
        nothing else (receiving goes on, stopping goes on)."""
        client = self.client
        if client is None:
            return
        try:
            await client.notify(event)
        except SessionExpired:
            raise
        except (*NETWORK_ERRORS, ILinkError) as exc:
            logger.warning("weixin: %s failed (%s); ignored", event, exc)

    async def _poll(self) -> None:
        """The long poll: hand each batch over, and save its cursor once the batch is journalled."""
        client = self.client
        assert client is not None
        self._notified = True  # set first: a stop while notifystart is on its way still says notifystop
        await self._notify("notifystart")
        logger.info("weixin: receiving messages")
        while True:
            updates = await self._reaching(client.get_updates, self.cursor, self.hold_s)
            if updates.hold_s is not None:
                self.hold_s = updates.hold_s
            taken = [msg for msg in (self._take(raw) for raw in updates.msgs) if msg is not None]
            await self.settle_intake()
            if updates.cursor and updates.cursor != self.cursor:
                self.cursor = updates.cursor
                self.files.save_cursor(updates.cursor, self._tokens)
            for user in dict.fromkeys(msg.user_id for msg in taken):
                self._send_held_later(user)

    def _take(self, raw: dict[str, Any]) -> IncomingMessage | None:
        """Hand one message to the dispatcher (its context token kept first, as the user's newest); a bad one
        is logged and the next goes on."""
        try:
            incoming = to_incoming(raw, self.name)
            if incoming is None:
                return None
            token = str(incoming.extra.get("context_token") or "")
            if token:
                self._tokens[incoming.user_id] = (token, time.time())
            self.deliver_nowait(incoming)
            return incoming
        except Exception:  # noqa: BLE001 - one bad message must not stop the channel
            logger.exception("weixin: could not read message %s", raw.get("message_id", "?"))
            return None

    # --- the number the phone shows at login (need_verifycode) -------------------------------------
    @property
    def wants_verify_code(self) -> bool:
        """The login waits for the number WeChat shows on the phone."""
        return self.login_flow.verify.wanted

    @property
    def login_question(self) -> str | None:
        """The number WeChat shows on the phone, while the login waits for it (the web console asks for it)."""
        return "WeChat shows a number on the phone. Type it here to connect the bot." if self.wants_verify_code \
            else None

    def answer_login(self, answer: str) -> bool:
        """The number typed in the web console; False when no login is waiting for one."""
        return self.login_flow.verify.enter(answer)

    def enter_verify_code(self, code: str) -> bool:
        """The number typed (the web console, a test); False when no login is waiting for one."""
        return self.login_flow.verify.enter(code)

    # --- context tokens -------------------------------------------------------------------------
    def _load_tokens(self) -> None:
        """Take in the tokens the receiving process kept with the cursor that are newer than this process's (the
        file is read again only when it changed)."""
        try:
            stat = self.files.cursor_path.stat()
        except OSError:
            return
        if (stat.st_mtime_ns, stat.st_size) == self._tokens_seen:
            return
        self._tokens_seen = (stat.st_mtime_ns, stat.st_size)
        for user, (token, at) in self.files.load_tokens().items():
            if user not in self._tokens or at > self._tokens[user][1]:
                self._tokens[user] = (token, at)

    def newest_token(self, to: IncomingMessage) -> str:
        """The context token to reply to ``to``'s sender with: the newest one that user's messages brought (to
        this process, or to the receiving one, kept with its cursor), or ``to``'s own when it is newer (a message
        whose batch is not confirmed yet). A reminder's own token is the one of the message that set it: never
        preferred."""
        if self._task is None:  # another process receives: its tokens are kept with its cursor
            self._load_tokens()
        best = self._tokens.get(to.user_id)
        own = str(to.extra.get("context_token") or "")
        if own and to.content_type != REMINDER and (best is None or to.time.timestamp() > best[1]):
            return own
        return best[0] if best is not None else own

    # --- replies WeChat refused for the token: kept until the user writes again ---------------------
    def _hold(self, to: IncomingMessage, rest: str, exc: SendRefused) -> None:
        """Keep what WeChat would not take with the user's token, for when the user next writes."""
        kind = "reminder" if to.content_type == REMINDER else "reply"
        self.held.keep(to.user_id, rest, kind)
        logger.warning("weixin: WeChat refused the %s to %s (ret %d %s: the user's context token is used up or "
                       "older than 24 hours); it is kept and sent when they next write", kind, to.user_id, exc.ret,
                       exc.errmsg or "without a reason")

    def _send_held_later(self, user: str) -> None:
        waiting = self.held.waiting(user)
        if not waiting:
            return
        task = asyncio.create_task(self._send_held(user, waiting), name="weixin:held")
        self._held_tasks.add(task)
        task.add_done_callback(self._held_tasks.discard)

    async def _send_held(self, user: str, waiting: list[Path]) -> None:
        """Send what was kept for ``user``, oldest first, with the token their new message brought; what fails
        again stays kept (for their next message: never a retry loop)."""
        for path in waiting:
            try:
                held = self.held.load(path)
                to = IncomingMessage(channel=self.name, chat_id=user, user_id=user, text="",
                                     message_id=f"held-{path.stem}")
                refused = await self._put_out(self._client(), to, str(held.get("text") or ""),
                                              lambda rest, path=path, held=held: self.held.rest(path, held, rest))
            except (*NETWORK_ERRORS, ILinkError, NotLoggedIn, OSError, ValueError) as exc:
                logger.info("weixin: a kept message to %s did not go out yet (%s); it waits for their next message",
                            user, exc)
                return
            if refused:
                logger.info("weixin: WeChat refused the kept message to %s again; it waits for their next message",
                            user)
                return
            self.held.sent(path)
            logger.info("weixin: the kept %s to %s went out with their new message", held.get("kind", "message"),
                        user)

    # --- sending --------------------------------------------------------------------------------
    async def send(self, to: IncomingMessage, text: str) -> None:
        """Send the whole answer, split at 4,000 characters, to ``to``'s sender with their newest context token.

        Each piece goes out once: when one fails, what is left from it is remembered for this reply, and the
        outbox's retry sends from there. What WeChat refuses for the token is kept for the user's next message.
        """
        client = self._client()
        key = (to.chat_id, to.message_id, hashlib.sha256(text.encode()).hexdigest())
        rest = self._unsent.pop(key, text)

        def sent_up_to(left: str) -> None:
            self._unsent[key] = left
            while len(self._unsent) > UNSENT_KEPT:
                del self._unsent[next(iter(self._unsent))]

        try:
            refused = await self._put_out(client, to, rest, sent_up_to)
        except SessionExpired:
            if self.client is client:
                self.client = None  # the next try reads the login again (a new one once it is scanned)
            raise
        self._unsent.pop(key, None)
        if refused:
            self._hold(to, refused[0], refused[1])
        ticket = self._tickets.get(to.user_id)
        if ticket is not None:
            with contextlib.suppress(*NETWORK_ERRORS, ILinkError):
                await client.send_typing(to.user_id, ticket[0], TYPING_CANCEL)

    async def _put_out(self, client: ILinkClient, to: IncomingMessage, text: str,
                       sent_up_to: Any) -> tuple[str, SendRefused] | None:
        """Send ``text`` piece by piece with the user's newest token, calling ``sent_up_to(rest)`` after each
        piece. ``ret -2`` on a long piece: shorter pieces (the length that goes through is kept). Returns None
        when all went out, or (what is left, the refusal) when WeChat refused a short piece: the token."""
        token = self.newest_token(to)
        limit, shortened = self.piece_limit, False
        piece, after = take_piece(text, limit)
        while piece:
            try:
                await client.send_text(to.user_id, piece, token)
            except SendRefused as exc:
                if len(piece) <= MIN_PIECE:
                    return text, exc
                limit, shortened = max(MIN_PIECE, len(piece) // 2), True
                logger.info("weixin: WeChat refused a piece of %d characters (ret %d %s); trying %d", len(piece),
                            exc.ret, exc.errmsg, limit)
                piece, after = take_piece(text, limit)
                continue
            if shortened and limit < self.piece_limit:
                self.piece_limit = limit
                logger.warning("weixin: WeChat takes pieces of %d characters, not %d: replies are split so from "
                               "now on", limit, MESSAGE_LIMIT)
            text = after
            sent_up_to(text)
            piece, after = take_piece(text, limit)
        return None

    #: the largest file sent (our cap: the upload is encrypted in memory, and WeChat's own limit is larger)
    max_file_bytes = 50 * 1000 * 1000

    async def send_file(self, to: IncomingMessage, path: Path, *, filename: str, caption: str = "") -> None:
        """Send a file (uploaded encrypted to WeChat's CDN). The caption is left out: the command's answer
        follows as a text anyway, and a reply's context token allows only a few messages."""
        client = self._client()
        data = await asyncio.to_thread(path.read_bytes)
        await client.send_file(to.user_id, filename, data, self.newest_token(to))

    #: photos and voice messages are fetched from WeChat's CDN (DESIGN §5.1)
    fetches_media = True
    #: where a media reference without a ``full_url`` is fetched (WeChat's CDN; tests point it elsewhere)
    cdn_base_url = CDN_BASE_URL

    async def download(self, msg: IncomingMessage) -> bytes | None:
        """The photo or voice message's bytes: fetched from WeChat's CDN and decrypted."""
        media = msg.extra.get("media")
        if not isinstance(media, dict) or not media:
            raise ValueError("the message carries no usable reference to its file")
        return await self._client().download(media, hex_key=str(msg.extra.get("aeskey") or ""),
                                             limit=MAX_MEDIA_BYTES, cdn_base=self.cdn_base_url)

    def _client(self) -> ILinkClient:
        if self.client is None and not self._use_kept_login():
            raise NotLoggedIn("weixin is not logged in (waiting for the QR code to be scanned)")
        assert self.client is not None
        return self.client

    def retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        """Network errors, 5xx and a missing or ended login are retried (the reply waits for the new login);
        any other refusal by the API (a non-zero ret) is not."""
        if isinstance(exc, ILinkHTTPError):
            return 0.0 if exc.status >= 500 or exc.status == 429 else None
        if isinstance(exc, NotLoggedIn | SessionExpired):
            return 0.0
        if isinstance(exc, ILinkError):
            return None
        return super().retry_delay(exc, attempt)

    async def typing(self, to: IncomingMessage) -> None:
        """Show "typing…" in the chat (a ticket per user, fetched once a day); errors are ignored."""
        try:
            client = self._client()
        except NotLoggedIn:
            return
        try:
            ticket = self._tickets.get(to.user_id)
            if ticket is None or time.monotonic() - ticket[1] > TICKET_TTL_S:
                value = await client.typing_ticket(to.user_id, self.newest_token(to))
                ticket = self._tickets[to.user_id] = (value, time.monotonic())
            await client.send_typing(to.user_id, ticket[0])
        except (*NETWORK_ERRORS, ILinkError) as exc:
            self._tickets.pop(to.user_id, None)
            logger.debug("weixin: typing failed: %s", exc)
