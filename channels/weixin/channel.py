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
the ``context_token`` of the message it answers and a fresh ``client_id``. "typing…" uses the API's typing
ticket. Network failures back off (1 s doubling to 30 s) with one log line when the API cannot be reached and
one when it can again; errcode -14 is one log line and a new QR code.

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
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import segno

from channels.base import BaseChannel
from channels.registry import register_channel
from channels.weixin.client import (
    CDN_BASE_URL,
    FILE_ITEM,
    IMAGE_ITEM,
    LONG_POLL_S,
    TEXT_ITEM,
    TYPING_CANCEL,
    USER_MESSAGE,
    VIDEO_ITEM,
    VOICE_ITEM,
    ILinkClient,
    ILinkError,
    ILinkHTTPError,
    SessionExpired,
)
from channels.weixin.login import Account, LoginFiles, LoginState, QrLogin
from channels.weixin.text import MESSAGE_LIMIT, split_text
from core.errors import BotError
from core.messages import IncomingMessage

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

#: what a message that is not text is called in ``IncomingMessage.content_type``
CONTENT_TYPES = {IMAGE_ITEM: "photo", VOICE_ITEM: "voice", FILE_ITEM: "document", VIDEO_ITEM: "video"}
#: a voice item's ``encode_type`` as a file suffix (WeChat records SILK unless it says otherwise)
AUDIO_FORMATS = {1: "pcm", 2: "adpcm", 4: "speex", 5: "amr", 6: "silk", 7: "mp3", 8: "ogg"}
#: the largest photo or voice message fetched from the CDN
MAX_MEDIA_BYTES = 20 * 1000 * 1000
#: backoff after a failed call: first and longest wait, in seconds
BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 30.0
#: a typing ticket is good for about a day; fetch a new one after this many seconds
TICKET_TTL_S = 12 * 3600.0
NETWORK_ERRORS = (aiohttp.ClientError, OSError, TimeoutError, ILinkHTTPError)


def to_incoming(raw: dict[str, Any], channel: str = "weixin") -> IncomingMessage | None:
    """One iLink message as an :class:`IncomingMessage`; None for the bot's own, empty and malformed ones."""
    sender = str(raw.get("from_user_id") or "")
    if not sender or raw.get("message_type", USER_MESSAGE) != USER_MESSAGE:
        return None
    listed = raw.get("item_list")
    items = [item for item in listed if isinstance(item, dict)] if isinstance(listed, list) else []
    if not items:
        return None  # nothing a person wrote (or a shape this version does not know)
    texts = [str((item.get("text_item") or {}).get("text") or "") for item in items if item.get("type") == TEXT_ITEM]
    text = "\n".join(t for t in texts if t)
    others = [item.get("type") for item in items if item.get("type") != TEXT_ITEM]
    extra: dict[str, Any] = {"context_token": str(raw.get("context_token") or "")}
    media = media_of(items)
    if media is not None:  # a photo (any text beside it is its caption) or a voice message: fetched later
        content_type, found = media
        extra.update(found)
    else:
        content_type = "text" if text or not others else CONTENT_TYPES.get(others[0], "other")
    quoted = next((item["ref_msg"] for item in items if isinstance(item.get("ref_msg"), dict)), {})
    quoted_item = quoted.get("message_item") if isinstance(quoted.get("message_item"), dict) else {}
    reply_to_text = str((quoted_item.get("text_item") or {}).get("text") or quoted.get("title") or "")
    # a uint64: Python's json reads it exactly, so str() keeps every digit
    message_id = raw.get("message_id") or raw.get("seq") or raw.get("client_id") or ""
    created = raw.get("create_time_ms")
    when = datetime.fromtimestamp(created / 1000, UTC) if isinstance(created, int | float) and created > 0 \
        else datetime.now(UTC)
    return IncomingMessage(channel=channel, chat_id=sender, user_id=sender, text=text, message_id=str(message_id),
                           time=when, content_type=content_type, reply_to_text=reply_to_text, extra=extra)


def media_of(items: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """A message's photo or voice message as (content type, what fetching it needs, for
    ``IncomingMessage.extra``); None when it has neither. A photo whose reference cannot be fetched is still a
    photo (its download fails: a short note)."""
    for item in items:
        kind = item.get("type")
        if kind == IMAGE_ITEM:
            image = item.get("image_item") if isinstance(item.get("image_item"), dict) else {}
            ref = _media_ref(image.get("media"))
            if ref is not None:
                return "photo", {"media": ref, "aeskey": str(image.get("aeskey") or "")}
        elif kind == VOICE_ITEM:
            voice = item.get("voice_item") if isinstance(item.get("voice_item"), dict) else {}
            audio = AUDIO_FORMATS.get(voice.get("encode_type"), "silk")
            return "voice", {"media": _media_ref(voice.get("media")) or {},
                             "transcript": str(voice.get("text") or "").strip(), "audio_format": audio}
    return None


def _media_ref(media: Any) -> dict[str, str] | None:
    """The parts of a CDN media reference a download needs; None without a download parameter."""
    if not isinstance(media, dict) or not (media.get("encrypt_query_param") or media.get("full_url")):
        return None
    return {key: str(media[key]) for key in ("encrypt_query_param", "aes_key", "full_url") if media.get(key)}


class NotLoggedIn(BotError):
    """A reply cannot go out yet: no login (the QR code waits to be scanned)."""


@register_channel("weixin")
class WeixinChannel(BaseChannel):
    """WeChat through its official bot API: QR login, long poll, replies with the message's context token."""

    name = "weixin"

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.files = LoginFiles(Path(config.data_dir))
        self.base_url = (config.weixin_base_url or "https://ilinkai.weixin.qq.com").rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task | None = None
        #: the API with the current login's token (None while logging in)
        self.client: ILinkClient | None = None
        #: the QR login in progress, or the last one (its state is shown by the web console)
        self.login: QrLogin | None = None
        self.cursor = ""
        #: seconds the server holds a long poll
        self.hold_s = LONG_POLL_S
        self._failures = 0
        self._tickets: dict[str, tuple[str, float]] = {}

    @property
    def login_qr(self) -> str | None:
        """The login QR code as an SVG ``data:`` URL while a scan is needed (the web console shows it)."""
        login = self.login
        if self.client is not None or login is None or not login.qr_content:
            return None
        return segno.make(login.qr_content, error="L").svg_data_uri(scale=6)

    @property
    def login_state(self) -> LoginState:
        """Where the login stands: confirmed while a token is in use."""
        if self.client is not None:
            return LoginState.CONFIRMED
        return self.login.state if self.login is not None else LoginState.LOGGED_OUT

    # --- lifecycle ------------------------------------------------------------------------------
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
        if intake:
            await self.start_intake()

    async def start_intake(self) -> bool:
        """Start the background task that logs in when needed and polls."""
        if self._task is None:
            self._task = asyncio.create_task(self._run_logged(), name="weixin:receive")
        return True

    async def stop_intake(self) -> None:
        """Stop receiving; what was fetched is journalled first (its cursor may stay unsaved: fetched again
        at the next start, and not answered twice)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.intake_settled is not None:
            await asyncio.shield(self.intake_settled())

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
        account = self.files.load_account()
        if account is None or self._session is None:
            return False
        self.client = ILinkClient(self._session, account.base_url, account.bot_token)
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
                account = await self._log_in()
                self.client = ILinkClient(self._session, account.base_url, account.bot_token)
            self.cursor = self.files.load_cursor()
            try:
                await self._poll()
            except SessionExpired:
                logger.warning("weixin: WeChat ended the session (errcode -14); a new QR code follows, "
                               "scan it to log in again")
                self.files.forget_account()
                self.client, self._tickets = None, {}

    async def _log_in(self) -> Account:
        """The QR login, tried again (with backoff) until it is confirmed."""
        assert self._session is not None
        while True:
            self.login = QrLogin(ILinkClient(self._session, self.base_url), self.files)
            try:
                account = await self.login.run()
            except (*NETWORK_ERRORS, ILinkError) as exc:
                await self._back_off(exc)
                continue
            self._reachable()
            return account

    async def _poll(self) -> None:
        """The long poll: hand each batch over, and save its cursor once the batch is journalled."""
        client = self.client
        assert client is not None
        logger.info("weixin: receiving messages")
        while True:
            try:
                updates = await client.get_updates(self.cursor, self.hold_s)
            except SessionExpired:
                raise
            except (*NETWORK_ERRORS, ILinkError) as exc:
                await self._back_off(exc)
                continue
            self._reachable()
            if updates.hold_s is not None:
                self.hold_s = updates.hold_s
            for raw in updates.msgs:
                self._take(raw)
            if self.intake_settled is not None:
                await asyncio.shield(self.intake_settled())
            if updates.cursor and updates.cursor != self.cursor:
                self.cursor = updates.cursor
                self.files.save_cursor(updates.cursor)

    def _take(self, raw: dict[str, Any]) -> None:
        """Hand one message to the dispatcher; a bad one is logged and the next goes on."""
        try:
            incoming = to_incoming(raw, self.name)
            if incoming is not None:
                self.deliver_nowait(incoming)
        except Exception:  # noqa: BLE001 - one bad message must not stop the channel
            logger.exception("weixin: could not read message %s", raw.get("message_id", "?"))

    async def _back_off(self, exc: BaseException) -> None:
        """Wait before the next try: 1 s, doubling to 30 s. The first failure in a row is one WARNING line."""
        self._failures += 1
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self._failures - 1))
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if self._failures == 1:
            logger.warning("weixin: WeChat's bot API at %s does not answer (%s); retrying in the background, "
                           "the other channels keep running", self.base_url, reason)
        else:
            logger.debug("weixin: still failing (%s); next try in %.0f s", reason, delay)
        await asyncio.sleep(delay)

    def _reachable(self) -> None:
        if self._failures:
            logger.info("weixin: WeChat's bot API answers again")
        self._failures = 0

    # --- sending --------------------------------------------------------------------------------
    async def send(self, to: IncomingMessage, text: str) -> None:
        """Send the whole answer, split at 4,000 characters, in reply to ``to`` (its context token)."""
        client = self._client()
        token = str(to.extra.get("context_token", ""))
        try:
            for piece in split_text(text, MESSAGE_LIMIT):
                await client.send_text(to.user_id, piece, token)
        except SessionExpired:
            if self.client is client:
                self.client = None  # the next try reads the login again (a new one once it is scanned)
            raise
        ticket = self._tickets.get(to.user_id)
        if ticket is not None:
            with contextlib.suppress(*NETWORK_ERRORS, ILinkError):
                await client.send_typing(to.user_id, ticket[0], TYPING_CANCEL)

    #: the largest file sent (our cap: the upload is encrypted in memory, and WeChat's own limit is larger)
    max_file_bytes = 50 * 1000 * 1000

    async def send_file(self, to: IncomingMessage, path: Path, *, filename: str, caption: str = "") -> None:
        """Send a file (uploaded encrypted to WeChat's CDN). The caption is left out: the command's answer
        follows as a text anyway, and a reply's context token allows only a few messages."""
        client = self._client()
        data = await asyncio.to_thread(path.read_bytes)
        await client.send_file(to.user_id, filename, data, str(to.extra.get("context_token", "")))

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
                value = await client.typing_ticket(to.user_id, str(to.extra.get("context_token", "")))
                ticket = self._tickets[to.user_id] = (value, time.monotonic())
            await client.send_typing(to.user_id, ticket[0])
        except (*NETWORK_ERRORS, ILinkError) as exc:
            self._tickets.pop(to.user_id, None)
            logger.debug("weixin: typing failed: %s", exc)
