"""The WeChat channel, on itchat-uos (the web WeChat protocol).

itchat blocks, so it runs in a thread of its own: login (QR code or hot reload), then a loop of
``core.configured_reply()``, whose handlers turn itchat messages into :class:`IncomingMessage` values and
hand them to the asyncio loop with ``run_coroutine_threadsafe``. Replies go back through ``core.send`` in a
worker thread, so the loop never blocks.

itchat's ``UserName`` values (``@abc…`` for people, ``@@abc…`` for groups) change at every login, so chat and
user ids are the stable remark name or nickname; the per-login ``UserName`` needed to answer travels in
``IncomingMessage.extra`` and is looked up again by name when it belongs to an earlier login.

Nothing here may take the bot down: login failures, network errors and itchat's ``sys.exit()`` end the
thread with one error line, and the other channels keep running.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

with contextlib.redirect_stdout(io.StringIO()):  # itchat writes a stray block character when imported
    import itchat
    from itchat.content import ATTACHMENT, CARD, MAP, PICTURE, RECORDING, SHARING, TEXT, VIDEO
    from itchat.storage import templates

from channels.base import BaseChannel
from channels.registry import register_channel
from channels.wechat.text import MESSAGE_LIMIT, QR_LOGIN_URL, render_qr, split_text, strip_mentions
from config.settings import Config
from core.errors import BotError
from core.messages import IncomingMessage

logger = logging.getLogger(__name__)



class _TracebackAsDetails(logging.Filter):
    """itchat logs tracebacks as the text of an error; make each one a record's details instead (its last
    line the message, at INFO: the channel logs its own error line), so the traceback goes to the log file
    and the console shows one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text.startswith("Traceback (most recent call last)"):
            record.msg, record.args = text.rstrip().splitlines()[-1][:300], None
            record.exc_text = text.rstrip()
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


# itchat's own records go through the root logger like everyone else's, not to its private stderr handler.
itchat.set_logging(showOnCmd=False)
logging.getLogger("itchat").addFilter(_TracebackAsDetails())

QR_FILE = "wechat_qr.png"
STATUS_FILE = "wechat.pkl"
#: after a hot reload itchat hands over the backlog; messages older than this many seconds are skipped
MAX_MESSAGE_AGE_S = 60
#: how long stop() waits for the itchat thread
JOIN_TIMEOUT_S = 5.0
DEDUP_SIZE = 1024
#: itchat message types handed on besides text (as content_type "picture", "recording", ...)
MEDIA_TYPES = (MAP, CARD, SHARING, PICTURE, RECORDING, ATTACHMENT, VIDEO)
#: texts starting with these make itchat's send() upload a file; "@msg@" in front keeps them plain text
_SEND_ESCAPES = ("@fil@", "@img@", "@msg@", "@vid@")
_WAKE_TYPE = "__wake__"
#: the app message type of a reply that quotes an earlier message
QUOTE_APP_TYPE = "57"
_OFF = "the wechat channel is off; other channels keep running"


class WeChatSendError(BotError):
    """WeChat refused a reply, or the chat could not be found in the current login."""


class _LoginAborted(Exception):
    """stop() was called while the QR login was waiting."""


@register_channel("wechat")
class WeChatChannel(BaseChannel):
    """WeChat through itchat-uos, with itchat in its own thread."""

    name = "wechat"

    def __init__(self, config: Config, *, core: Any = None) -> None:
        super().__init__()
        self._config = config
        self._core = core if core is not None else itchat.new_instance()
        self._data_dir = Path(config.data_dir)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._logged_in = threading.Event()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._seen_lock = threading.Lock()
        self._scanned_logged = False
        handler = self._core.msg_register([TEXT, *MEDIA_TYPES], isFriendChat=True, isGroupChat=True)
        handler(self._on_itchat_message)

    @property
    def qr_path(self) -> Path:
        """Where the login QR code is saved as PNG."""
        return self._data_dir / QR_FILE

    @property
    def status_path(self) -> Path:
        """The hot-reload login status file."""
        return self._data_dir / STATUS_FILE

    @property
    def logged_in(self) -> bool:
        """True while logged in and receiving."""
        return self._logged_in.is_set()

    # --- lifecycle ------------------------------------------------------------------------
    async def start(self, intake: bool = True) -> None:
        """Start the itchat thread (login, then receiving) and return at once."""
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="wechat-itchat", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Stop receiving, keep (hot reload) or end the login, and wait a little for the thread."""
        thread = self._thread
        if thread is None:
            return
        self._thread = None
        self._stopping.set()
        self._core.isLogging = False
        self._wake()
        await asyncio.to_thread(thread.join, JOIN_TIMEOUT_S)
        if thread.is_alive():
            logger.warning("wechat: the itchat thread did not end within %.0f s (still waiting on WeChat); "
                           "it ends with the process", JOIN_TIMEOUT_S)
        self._core.alive = False

    def _run(self) -> None:
        """The itchat thread: log in, then dispatch messages until stopped or logged out."""
        core = self._core
        try:
            self._data_dir.mkdir(parents=True, exist_ok=True)
            core.auto_login(
                hotReload=self._config.wechat_hot_reload, statusStorageDir=str(self.status_path),
                enableCmdQR=2, picDir=str(self.qr_path), qrCallback=self._on_qr,
                loginCallback=self._on_login, exitCallback=self._wake,
            )
            if self._stopping.is_set():
                return
            if not core.alive:
                self._failed("login failed: WeChat refused the web login or it did not complete "
                             "(many accounts can no longer use web WeChat)")
                return
            self.bot_username = core.storageClass.nickName or ""
            logger.info("wechat: logged in as %s", self.bot_username)
            self._logged_in.set()
            while core.alive and not self._stopping.is_set():
                core.configured_reply()
            if not self._stopping.is_set():
                self._failed("logged out (from the phone, or after repeated network errors)")
        except _LoginAborted:
            logger.info("wechat: login stopped")
        except SystemExit:
            self._failed("login failed: cannot reach the WeChat servers (itchat gave up)")
        except BaseException as exc:  # nothing in this thread may take the bot down
            self._failed(f"stopped by {type(exc).__name__}: {exc}")
        finally:
            self._logged_in.clear()
            self._end_session()

    def _failed(self, reason: str) -> None:
        """The itchat thread ended for good: one error line, and the channel is marked failed (so the bot
        exits when it has no other channel)."""
        logger.error("wechat: %s; %s", reason, _OFF)
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self.fail, reason)

    def _end_session(self) -> None:
        """On stop: keep the login for the next start (hot reload) or log out."""
        core = self._core
        if not (core.alive and self._stopping.is_set()):
            return
        try:
            if self._config.wechat_hot_reload:
                core.dump_login_status(str(self.status_path))
            else:
                core.logout()
        except Exception as exc:  # best effort on the way out
            logger.warning("wechat: could not save or end the login: %s: %s", type(exc).__name__, exc)
        core.alive = False

    def _wake(self) -> None:
        """Wake configured_reply() (it waits up to 1 s for a message) with a message nobody handles."""
        self._core.msgList.put({"Type": _WAKE_TYPE, "User": templates.User()})

    # --- login callbacks (itchat thread) ----------------------------------------------------
    def _on_qr(self, uuid: str = "", status: str = "", qrcode: bytes = b"") -> None:
        """itchat's qrCallback: save and show the QR code; abort the login once stop() was called."""
        if self._stopping.is_set():
            raise _LoginAborted
        if status == "0":
            self.qr_path.write_bytes(qrcode)
            url = QR_LOGIN_URL + uuid
            self._show(render_qr(url))
            logger.warning("wechat: scan the QR code above or %s with the WeChat app to log in (%s)",
                           self.qr_path, url)
        elif status == "201" and not self._scanned_logged:
            self._scanned_logged = True
            logger.info("wechat: QR code scanned; confirm the login on the phone")

    def _on_login(self) -> None:
        """itchat's loginCallback: the QR code is no longer needed."""
        self.qr_path.unlink(missing_ok=True)

    @staticmethod
    def _show(text: str) -> None:
        """Write the QR code to the terminal (stdout when it is one, so piped output stays clean)."""
        stream = sys.stdout if sys.stdout.isatty() else sys.stderr
        try:
            stream.write(text)
            stream.flush()
        except (UnicodeEncodeError, OSError, ValueError):
            logger.info("wechat: cannot draw the QR code on this terminal; open the PNG instead")

    # --- receiving (itchat thread) -----------------------------------------------------------
    def _on_itchat_message(self, msg: Any) -> None:
        """itchat's handler: convert and hand over to the loop. Returns None, so itchat sends nothing."""
        try:
            incoming = self.to_incoming(msg)
        except Exception:
            logger.exception("wechat: could not read an itchat message")
            return None
        if incoming is not None:
            self._submit(incoming)
        return None

    def _submit(self, incoming: IncomingMessage) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            logger.warning("wechat: no running loop; message %s dropped", incoming.message_id)
            return
        coro = self.deliver(incoming)
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # the loop closed meanwhile
            coro.close()
            return
        future.add_done_callback(_log_delivery_failure)

    def _first_time(self, message_id: str) -> bool:
        """True the first time a MsgId is seen (itchat can hand the same message over twice)."""
        if not message_id:
            return True
        with self._seen_lock:
            if message_id in self._seen:
                return False
            self._seen[message_id] = None
            if len(self._seen) > DEDUP_SIZE:
                self._seen.popitem(last=False)
            return True

    def to_incoming(self, msg: Any) -> IncomingMessage | None:
        """Turn one itchat message into an IncomingMessage; None for the bot's own, old or repeated ones."""
        core = self._core
        own = core.storageClass.userName or ""
        sender = msg.get("FromUserName", "")
        if sender == own:
            return None  # the bot's own message (or the owner typing on the phone)
        message_id = str(msg.get("MsgId", ""))
        created = int(msg.get("CreateTime") or 0)
        if self._config.wechat_hot_reload and created and created < time.time() - MAX_MESSAGE_AGE_S:
            logger.debug("wechat: skipped message %s from before the login (%d s old)",
                         message_id, int(time.time()) - created)
            return None
        if not self._first_time(message_id):
            logger.debug("wechat: duplicate message %s ignored", message_id)
            return None
        kind = msg.get("Type", "")
        text = msg.get("Text", "") if kind == TEXT else ""
        content_type = "text" if kind == TEXT else str(kind).lower()
        quote = parse_quote(msg.get("Content", "")) if kind == SHARING else None
        if quote is not None:  # a reply quoting an earlier message: its own text, and what it quotes
            text, content_type = quote[0], "text"
        reply_to_name, reply_to_text = quote[1:] if quote is not None else ("", "")
        when = datetime.fromtimestamp(created, UTC) if created else datetime.now(UTC)
        user = msg.get("User") or {}
        if isinstance(user, templates.Chatroom) or sender.startswith("@@"):
            group_name = user.get("NickName", "") or ""
            speaker = msg.get("ActualNickName", "") or msg.get("ActualUserName", "")
            own_names = [(user.get("Self") or {}).get("DisplayName", ""), core.storageClass.nickName or ""]
            return IncomingMessage(
                channel=self.name, chat_id=group_name or sender, user_id=speaker,
                text=strip_mentions(text, own_names) if text else "", user_name=speaker, is_group=True,
                group_name=group_name, mentions_bot=bool(msg.get("IsAt")), message_id=message_id, time=when,
                content_type=content_type, reply_to_name=reply_to_name, reply_to_text=reply_to_text,
                extra={"to_user_name": sender, "actual_user_name": msg.get("ActualUserName", ""),
                       "bot_user_name": own},
            )
        stable = user.get("RemarkName", "") or user.get("NickName", "") or sender
        return IncomingMessage(
            channel=self.name, chat_id=stable, user_id=stable, text=text,
            user_name=user.get("NickName", "") or stable, message_id=message_id, time=when,
            content_type=content_type, reply_to_name=reply_to_name, reply_to_text=reply_to_text,
            extra={"to_user_name": sender, "bot_user_name": own},
        )

    # --- sending ------------------------------------------------------------------------------
    async def send(self, to: IncomingMessage, text: str) -> None:
        """Reply to the chat of ``to``; in groups the reply starts with ``@<name> ``."""
        if to.is_group and to.user_name and not text.startswith("@" + to.user_name):
            text = f"@{to.user_name} {text}"
        if not text.strip():
            return
        target = await asyncio.to_thread(self.resolve_target, to)
        if not target:
            raise WeChatSendError(f"no WeChat chat named {to.chat_id!r} in the current login")
        for chunk in split_text(text, MESSAGE_LIMIT):
            await asyncio.to_thread(self._send_chunk, chunk, target)

    def resolve_target(self, to: IncomingMessage) -> str:
        """The current login's UserName of the chat ``to`` came from ("" when it cannot be found)."""
        core = self._core
        stored = str(to.extra.get("to_user_name", ""))
        origin = to.extra.get("bot_user_name")
        if stored and (origin is None or origin == core.storageClass.userName):
            return stored  # received in this login: its UserName is still valid
        return self._lookup(to.chat_id, to.is_group) or stored

    def _lookup(self, name: str, is_group: bool) -> str:
        """Find a chat's current UserName by its stable name (group title, remark name or nickname)."""
        core = self._core
        if name.startswith("@"):
            return name  # the id fell back to a UserName: nothing better to look for
        if is_group:
            rooms = core.search_chatrooms(name=name) or []  # substring match: insist on the exact title
            exact = [room for room in rooms if room.get("NickName") == name]
            return exact[0]["UserName"] if exact else ""
        own = core.storageClass.userName
        for found in (core.search_friends(remarkName=name), core.search_friends(name=name)):
            for friend in found or []:
                if friend.get("UserName") and friend["UserName"] != own:
                    return friend["UserName"]
        return ""

    def _send_chunk(self, chunk: str, target: str) -> None:
        """Send one message through itchat (a worker thread; itchat's requests block)."""
        if chunk[:5] in _SEND_ESCAPES:
            chunk = "@msg@" + chunk
        result = self._core.send(chunk, target)
        if not result:
            detail = result.get("BaseResponse", {}).get("ErrMsg", "") if isinstance(result, dict) else result
            raise WeChatSendError(f"WeChat refused the message: {detail}")


def parse_quote(content: str) -> tuple[str, str, str] | None:
    """A WeChat quote reply (an app message of type 57): (its text, the quoted author, the quoted text).

    None for any other sharing, and when the quoted message is not text (a picture, a file).
    """
    start, end = content.find("<msg>"), content.rfind("</msg>")
    if start < 0 or end < 0 or "<refermsg>" not in content:
        return None
    try:
        root = ElementTree.fromstring(content[start:end + len("</msg>")])
    except ElementTree.ParseError:
        return None
    appmsg = root.find("appmsg")
    refer = appmsg.find("refermsg") if appmsg is not None else None
    if refer is None or (appmsg.findtext("type") or "").strip() != QUOTE_APP_TYPE:
        return None
    quoted = (refer.findtext("content") or "").strip() if (refer.findtext("type") or "1").strip() == "1" else ""
    if not quoted:
        return None
    return (appmsg.findtext("title") or "").strip(), (refer.findtext("displayname") or "").strip(), quoted


def _log_delivery_failure(future: Future) -> None:
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        logger.error("wechat: handling a message failed: %s: %s", type(exc).__name__, exc)
