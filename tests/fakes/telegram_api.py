"""A fake Telegram Bot API server on 127.0.0.1 that the real python-telegram-bot talks to.

Point PTB at it with ``base_url=api.base_url`` and ``base_file_url=api.base_file_url`` (or
``telegram_base_url`` in config.json). Bodies arrive form-encoded or multipart with JSON-encoded values;
URLs look like ``/bot<TOKEN>/<method>``. ``getUpdates`` is a real long poll honouring ``offset`` and
``timeout``. A wrong token gets 401 ``Unauthorized``; an unknown method gets 404 ``Not Found``.

Incoming traffic is scripted with :meth:`FakeTelegramAPI.push_text`, :meth:`push_sticker`,
:meth:`push_message` and :meth:`push_update`. While a webhook is set, pushed updates are POSTed to it
(from a helper thread, with the secret token header), as Telegram would; after
:meth:`FakeTelegramAPI.set_webhook_targets` they go to a list of targets instead (several bot processes,
or their load balancer), per chat in order and redelivered on failure (tests/fakes/webhooks.py). Like
Telegram, a second getUpdates ends the one still waiting with 409 Conflict; :attr:`pollers` records who
polled. What the bot sent is in
:attr:`sent`, :attr:`documents` (``sendDocument``: multipart uploads of at most 50 MB, as the Bot API),
:attr:`actions`, :attr:`commands`, :attr:`edits` (with :attr:`edit_times`) and, for every call,
:attr:`calls`. :attr:`messages` is the chat as its users see it: every bot message with its current text,
after edits; :meth:`chat_texts` gives a chat's visible texts. Like Telegram, an edit to the same content
fails with "message is not modified", and an edit of an unknown message with "message to edit not found".
:meth:`FakeTelegramAPI.stall_next` holds a call past the client's timeout. With :attr:`webhook_retries` set,
a webhook post not answered 2xx is posted again, as Telegram does.
"""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import html
import itertools
import json
import logging
import mimetypes
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.fakes.http_server import FakeService
from tests.fakes.telegram_html import HTMLParseError, parse_telegram_html
from tests.fakes.webhooks import WebhookRouter

logger = logging.getLogger(__name__)

#: Parameters that PTB sends as plain strings (everything else is JSON-encoded).
_STRING_PARAMS = frozenset({"text", "parse_mode", "action", "url", "secret_token", "caption", "language_code",
                            "description", "short_description", "name", "ip_address"})
MAX_MESSAGE_LENGTH = 4096
#: The Bot API's limits for a bot's upload (multipart/form-data) and for a caption.
MAX_UPLOAD_BYTES = 50 * 1000 * 1000
MAX_CAPTION_LENGTH = 1024


@dataclass(frozen=True)
class UploadedFile:
    """A file part of a multipart request: its file name, its declared type and its bytes."""

    filename: str
    content_type: str
    data: bytes


class TelegramAPIError(Exception):
    """A Bot API error response."""

    def __init__(self, code: int, description: str, parameters: dict[str, Any] | None = None) -> None:
        super().__init__(description)
        self.code = code
        self.description = description
        self.parameters = parameters


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram entity offsets."""
    return len(text.encode("utf-16-le")) // 2


def decode_params(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Decode PTB's form values: JSON-encoded, except plain-string parameters."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in _STRING_PARAMS:
            out[key] = value
            continue
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


class FakeTelegramAPI(FakeService):
    """A Bot API server for one bot, on a random loopback port, served from a background thread."""

    thread_name = "fake-telegram"

    def __init__(self, *, bot_id: int = 7000001, username: str = "fake_test_bot", first_name: str = "Fake Bot",
                 token: str | None = None) -> None:
        super().__init__()
        self.bot_id = bot_id
        self.username = username
        self.token = token or f"{bot_id}:AAFakeTokenForTests-0123456789abcdef"
        self.bot_user = {"id": bot_id, "is_bot": True, "first_name": first_name, "username": username,
                         "can_join_groups": True, "can_read_all_group_messages": False,
                         "supports_inline_queries": False}
        #: when true, sendMessage/editMessageText with parse_mode=HTML fail with "can't parse entities"
        self.reject_html = False
        self._cond = threading.Condition()
        self._stopping = False
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1)
        self._chats: dict[int, dict[str, Any]] = {}
        self._failures: dict[str, list[TelegramAPIError]] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []
        self.commands: list[list[dict[str, Any]]] = []
        self.edits: list[dict[str, Any]] = []
        #: every document sent: {"chat_id", "message_id", "file_name", "mime_type", "data", "caption", "params"}
        self.documents: list[dict[str, Any]] = []
        #: ``time.monotonic()`` of each entry of :attr:`edits`
        self.edit_times: list[float] = []
        #: (chat id, message id) -> {"chat_id", "message_id", "text", "parse_mode", "visible", "sent_at"}
        self.messages: dict[tuple[int, int], dict[str, Any]] = {}
        self.webhook: dict[str, Any] | None = None
        self.webhook_deliveries: list[int] = []
        #: how many times a webhook post answered with an error is posted again, and how long apart (seconds)
        self.webhook_retries = 0
        self.webhook_retry_delay = 0.2
        self._stalls: dict[str, list[float]] = {}
        self._delivery_threads: list[threading.Thread] = []
        #: set by :meth:`set_webhook_targets`: several bot processes behind one webhook
        self.webhook_router: WebhookRouter | None = None
        #: ``(time.monotonic(), owner)`` of every getUpdates call; owner is ``peer_owner(client address)``
        self.pollers: list[tuple[float, Any]] = []
        #: maps a client's (host, port) to who it is (e.g. a process id); None keeps the address
        self.peer_owner: Any = None
        self._peer = threading.local()
        self._poll_generation = 0
        #: file ids whose declared size is over the Bot API's 20 MB: getFile refuses them
        self.too_big: set[str] = set()
        #: files served by getFile and ``/file/bot<token>/<file_path>``: file_id -> (file_unique_id, path, bytes)
        self.files: dict[str, tuple[str, str, bytes]] = {}
        #: ``file_path`` of every file download, in order
        self.downloads: list[str] = []
        self._file_ids = itertools.count(1)

    # --- lifecycle (FakeService) ---------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return _make_handler(self)

    def _starting(self) -> None:
        self._stopping = False

    def _wake(self) -> None:
        if self.webhook_router is not None:
            self.webhook_router.stop()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def _threads(self) -> list[threading.Thread]:
        return self._delivery_threads + (self.webhook_router.threads() if self.webhook_router else [])

    def set_webhook_targets(self, targets: list[str], **options: Any) -> WebhookRouter:
        """Deliver webhook updates to ``targets`` (round robin, per chat in order, redelivered on failure)
        instead of the URL the bots registered; ``options`` go to :class:`WebhookRouter`."""
        self.webhook_router = WebhookRouter(targets, **options)
        return self.webhook_router

    @property
    def base_url(self) -> str:
        """For PTB's ``base_url`` / ``telegram_base_url`` (PTB appends the token)."""
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        """For PTB's ``base_file_url``."""
        return f"http://127.0.0.1:{self.port}/file/bot"

    # --- incoming traffic --------------------------------------------------------------------
    def push_update(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue a raw update (``update_id`` is filled in when missing); returns it."""
        update = dict(update)
        with self._cond:
            update.setdefault("update_id", next(self._update_ids))
            msg = update.get("message") or update.get("edited_message")
            if msg and "chat" in msg:
                self._chats[msg["chat"]["id"]] = msg["chat"]
            if self.webhook:
                self._deliver_webhook(update)
            else:
                self._updates.append(update)
                self._cond.notify_all()
        return update

    def push_message(self, chat_id: int, *, user_id: int, first_name: str = "User", last_name: str | None = None,
                     username: str | None = None, chat_type: str = "private", title: str | None = None,
                     reply_to_bot: bool = False, message_id: int | None = None, is_bot: bool = False,
                     date: int | None = None, **content: Any) -> dict[str, Any]:
        """Queue a message update with arbitrary content fields (``text``, ``sticker``, ``photo``, ...)."""
        sender: dict[str, Any] = {"id": user_id, "is_bot": is_bot, "first_name": first_name}
        if last_name:
            sender["last_name"] = last_name
        if username:
            sender["username"] = username
        if chat_type == "private":
            chat = {"id": chat_id, "type": "private", **{k: v for k, v in sender.items() if k != "is_bot"}}
        else:
            chat = {"id": chat_id, "type": chat_type, "title": title or f"Group {chat_id}"}
        message: dict[str, Any] = {
            "message_id": message_id if message_id is not None else next(self._message_ids),
            "date": date if date is not None else int(time.time()), "chat": chat, "from": sender,
            **{k: v for k, v in content.items() if v is not None},
        }
        if reply_to_bot:
            message["reply_to_message"] = {"message_id": next(self._message_ids), "date": int(time.time()) - 60,
                                           "chat": chat, "from": self.bot_user, "text": "an earlier answer"}
        return self.push_update({"message": message})

    def push_text(self, chat_id: int, text: str, *, user_id: int, first_name: str = "User",
                  chat_type: str = "private", title: str | None = None, reply_to_bot: bool = False,
                  entities: list[dict[str, Any]] | None = None, **kwargs: Any) -> dict[str, Any]:
        """Queue a text message; ``@<bot username>`` in the text gets a "mention" entity automatically."""
        if entities is None:
            entities = []
            needle = "@" + self.username
            start = text.lower().find(needle.lower())
            if start >= 0:
                entities.append({"type": "mention", "offset": utf16_len(text[:start]), "length": utf16_len(needle)})
            if text.startswith("/"):
                entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(text.split()[0])})
        return self.push_message(chat_id, user_id=user_id, first_name=first_name, chat_type=chat_type, title=title,
                                 reply_to_bot=reply_to_bot, text=text, entities=entities or None, **kwargs)

    def push_sticker(self, chat_id: int, *, user_id: int, first_name: str = "User", emoji: str = "👍",
                     **kwargs: Any) -> dict[str, Any]:
        """Queue a sticker message."""
        sticker = {"file_id": "sticker-file", "file_unique_id": "sticker-u", "type": "regular", "width": 512,
                   "height": 512, "is_animated": False, "is_video": False, "emoji": emoji}
        return self.push_message(chat_id, user_id=user_id, first_name=first_name, sticker=sticker, **kwargs)

    def add_file(self, data: bytes, *, folder: str = "photos", suffix: str = ".jpg") -> dict[str, Any]:
        """Keep ``data`` as a file the bot can fetch (getFile, then the file URL); returns its
        ``{"file_id", "file_unique_id", "file_size"}`` as the Bot API puts it in a message."""
        n = next(self._file_ids)
        file_id = f"AgACAgIAAxkBAAI{n:06d}fake"
        unique = f"AQAD{n:06d}"
        with self._cond:
            self.files[file_id] = (unique, f"{folder}/file_{n}{suffix}", data)
        return {"file_id": file_id, "file_unique_id": unique, "file_size": len(data)}

    def push_photo(self, chat_id: int, data: bytes, *, user_id: int, caption: str | None = None,
                   width: int = 1280, height: int = 960, **kwargs: Any) -> dict[str, Any]:
        """Queue a photo message as Telegram sends one: several sizes (thumbnails and the full size, the
        largest last); every size serves ``data`` (the bot should fetch the largest)."""
        sizes = []
        for scale in (0.0703125, 0.25, 0.625, 1.0):  # 90, 320, 800 and full width, as Telegram makes them
            entry = self.add_file(data)
            sizes.append({**entry, "width": max(1, int(width * scale)), "height": max(1, int(height * scale))})
        entities = None
        if caption and "@" + self.username in caption:
            start = caption.find("@" + self.username)
            entities = [{"type": "mention", "offset": utf16_len(caption[:start]),
                         "length": utf16_len("@" + self.username)}]
        return self.push_message(chat_id, user_id=user_id, photo=sizes, caption=caption,
                                 caption_entities=entities, **kwargs)

    def push_voice(self, chat_id: int, data: bytes, *, user_id: int, duration: int = 3,
                   **kwargs: Any) -> dict[str, Any]:
        """Queue a voice note (OGG/Opus, as Telegram's clients record them)."""
        entry = self.add_file(data, folder="voice", suffix=".oga")
        voice = {**entry, "duration": duration, "mime_type": "audio/ogg"}
        return self.push_message(chat_id, user_id=user_id, voice=voice, **kwargs)

    def push_document(self, chat_id: int, data: bytes, *, user_id: int, file_name: str,
                      mime_type: str = "application/pdf", caption: str | None = None, declared_size: int | None = None,
                      **kwargs: Any) -> dict[str, Any]:
        """Queue a document message (a Document object, as the Bot API sends one). ``declared_size`` stands for a
        file larger than the test keeps in memory: the message declares it, and getFile refuses it as the Bot
        API refuses files over 20 MB ("file is too big")."""
        entry = self.add_file(data, folder="documents", suffix="." + file_name.rsplit(".", 1)[-1])
        if declared_size is not None:
            entry["file_size"] = declared_size
            with self._cond:
                self.too_big.add(entry["file_id"])
        document = {**entry, "file_name": file_name, "mime_type": mime_type}
        entities = None
        if caption and caption.startswith("/"):
            command = caption.split()[0]
            entities = [{"type": "bot_command", "offset": 0, "length": utf16_len(command)}]
        return self.push_message(chat_id, user_id=user_id, document=document, caption=caption,
                                 caption_entities=entities, **kwargs)

    def file_bytes(self, file_path: str) -> bytes | None:
        """The bytes served at ``/file/bot<token>/<file_path>``, or None."""
        with self._cond:
            for _unique, path, data in self.files.values():
                if path == file_path:
                    self.downloads.append(file_path)
                    return data
        return None

    def fail_next(self, method: str, code: int, description: str, parameters: dict[str, Any] | None = None) -> None:
        """Make the next call of ``method`` fail (e.g. 429 with ``{"retry_after": 1}``)."""
        with self._cond:
            self._failures.setdefault(method.lower(), []).append(TelegramAPIError(code, description, parameters))

    def stall_next(self, method: str, seconds: float) -> None:
        """Hold the next call of ``method`` for ``seconds``, then answer 504 without carrying it out (a proxy
        that gave up before Telegram saw the request): the client's timeout runs out first."""
        with self._cond:
            self._stalls.setdefault(method.lower(), []).append(seconds)

    @property
    def pending_updates(self) -> int:
        """Updates not yet acknowledged by an ``offset``."""
        with self._cond:
            return len(self._updates)

    # --- waiting -----------------------------------------------------------------------------
    async def wait_for_sent(self, n: int, timeout: float = 5.0) -> list[dict[str, Any]]:  # noqa: ASYNC109
        """Wait until ``n`` messages were sent; raise ``TimeoutError`` otherwise."""
        deadline = time.monotonic() + timeout
        while len(self.sent) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"expected {n} sent messages, got {len(self.sent)}: {self.sent!r}")
            await asyncio.sleep(0.01)
        return list(self.sent)

    def wait_for_sent_sync(self, n: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Blocking :meth:`wait_for_sent`, for tests that run the bot in another process or thread."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.sent) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"expected {n} sent messages, got {len(self.sent)}: {self.sent!r}")
                self._cond.wait(left)
            return list(self.sent)

    async def wait_for(self, predicate, timeout: float = 5.0) -> None:  # noqa: ASYNC109 - test helper
        """Wait until ``predicate()`` is true; raise ``TimeoutError`` otherwise."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("condition not met")
            await asyncio.sleep(0.01)

    # --- the API (runs in handler threads) ---------------------------------------------------
    def call(self, method: str, params: dict[str, Any]) -> Any:
        """Answer one Bot API method; raise :class:`TelegramAPIError` for an error response."""
        name = method.lower()
        with self._cond:
            self.calls.append((method, params))
            failures = self._failures.get(name)
            if failures:
                raise failures.pop(0)
            stalls = self._stalls.get(name)
            stall = stalls.pop(0) if stalls else None
        if stall is not None:
            time.sleep(stall)
            raise TelegramAPIError(504, "Gateway Timeout")
        if name == "getupdates":
            return self._get_updates(params)
        handler = getattr(self, f"_m_{name}", None)
        if handler is None:
            raise TelegramAPIError(404, "Not Found")
        with self._cond:
            result = handler(params)
            self._cond.notify_all()
            return result

    def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        limit = int(params.get("limit") or 100)
        deadline = time.monotonic() + timeout
        peer = getattr(self._peer, "value", None)
        owner = self.peer_owner(peer) if self.peer_owner is not None and peer is not None else peer
        with self._cond:
            if self.webhook:
                raise TelegramAPIError(409, "Conflict: can't use getUpdates method while webhook is active; "
                                            "use deleteWebhook to delete the webhook first")
            # Like Telegram, a new getUpdates ends the one still waiting (a second bot instance).
            self.pollers.append((time.monotonic(), owner))
            self._poll_generation += 1
            mine = self._poll_generation
            self._cond.notify_all()
            while True:
                if self._poll_generation != mine:
                    raise TelegramAPIError(409, "Conflict: terminated by other getUpdates request; make sure that "
                                                "only one bot instance is running")
                if offset:
                    self._updates = [u for u in self._updates if u["update_id"] >= offset]
                if self._updates or self._stopping:
                    return [json.loads(json.dumps(u)) for u in self._updates[:limit]]
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._cond.wait(left)

    def _m_getme(self, params: dict[str, Any]) -> dict[str, Any]:
        return self.bot_user

    def _m_sendmessage(self, params: dict[str, Any]) -> dict[str, Any]:
        text = str(params.get("text") or "")
        visible = self._check_text(text, params.get("parse_mode"))
        message = self._bot_message(params["chat_id"], text=visible)
        self.sent.append({"chat_id": params["chat_id"], "text": text, "parse_mode": params.get("parse_mode"),
                          "message_id": message["message_id"], "params": params})
        self.messages[(int(params["chat_id"]), message["message_id"])] = {
            "chat_id": int(params["chat_id"]), "message_id": message["message_id"], "text": text,
            "parse_mode": params.get("parse_mode"), "visible": visible, "sent_at": time.monotonic()}
        return message

    def _m_editmessagetext(self, params: dict[str, Any]) -> dict[str, Any]:
        text = str(params.get("text") or "")
        visible = self._check_text(text, params.get("parse_mode"))
        key = (int(params.get("chat_id") or 0), int(params.get("message_id") or 0))
        current = self.messages.get(key)
        if current is None:
            raise TelegramAPIError(400, "Bad Request: message to edit not found")
        if _content(text, params.get("parse_mode")) == _content(current["text"], current["parse_mode"]):
            raise TelegramAPIError(400, "Bad Request: message is not modified: specified new message content and "
                                        "reply markup are exactly the same as a current content and reply markup "
                                        "of the message")
        self.edits.append(params)
        self.edit_times.append(time.monotonic())
        current.update(text=text, parse_mode=params.get("parse_mode"), visible=visible)
        return self._bot_message(params.get("chat_id"), text=visible, message_id=params.get("message_id"))

    def chat_texts(self, chat_id: int) -> list[str]:
        """What a chat shows of the bot's messages, oldest first: each one's current (raw) text."""
        with self._cond:
            return [m["text"] for key, m in sorted(self.messages.items()) if key[0] == int(chat_id)]

    def _check_text(self, text: str, parse_mode: str | None) -> str:
        visible = text
        if parse_mode and parse_mode.upper() == "HTML":
            if self.reject_html:
                raise TelegramAPIError(400, "Bad Request: can't parse entities: Unsupported start tag \"x\"")
            try:
                visible = parse_telegram_html(text)
            except HTMLParseError as exc:
                raise TelegramAPIError(400, f"Bad Request: {exc}") from None
        if not visible.strip():
            raise TelegramAPIError(400, "Bad Request: message text is empty")
        if len(visible) > MAX_MESSAGE_LENGTH:
            raise TelegramAPIError(400, "Bad Request: message is too long")
        return visible

    def _bot_message(self, chat_id: Any, *, text: str, message_id: Any = None) -> dict[str, Any]:
        cid = int(chat_id)
        chat = self._chats.get(cid) or {"id": cid, "type": "private" if cid > 0 else "supergroup",
                                         **({"first_name": "User"} if cid > 0 else {"title": "Group"})}
        return {"message_id": int(message_id) if message_id is not None else next(self._message_ids),
                "date": int(time.time()), "chat": chat, "from": self.bot_user, "text": text}

    def _m_senddocument(self, params: dict[str, Any]) -> dict[str, Any]:
        document = params.get("document")
        if document is None or document == "":
            raise TelegramAPIError(400, "Bad Request: there is no document in the request")
        if not isinstance(document, UploadedFile):  # a file_id or URL: this fake holds no earlier files
            raise TelegramAPIError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        if len(document.data) > MAX_UPLOAD_BYTES:
            raise TelegramAPIError(413, "Request Entity Too Large")
        if not document.data:
            raise TelegramAPIError(400, "Bad Request: file must be non-empty")
        caption = params.get("caption")
        if caption is not None and len(str(caption)) > MAX_CAPTION_LENGTH:
            raise TelegramAPIError(400, "Bad Request: message caption is too long")
        message = self._bot_message(params["chat_id"], text="")
        del message["text"]
        mime = mimetypes.guess_type(document.filename)[0] or "application/octet-stream"
        number = len(self.documents) + 1
        message["document"] = {"file_name": document.filename, "mime_type": mime,
                               "file_id": f"BQACAgIAAxkDAAI{number:06d}{message['message_id']:06d}",
                               "file_unique_id": f"AgAD{number:06d}", "file_size": len(document.data)}
        if caption:
            message["caption"] = str(caption)
        self.documents.append({"chat_id": int(params["chat_id"]), "message_id": message["message_id"],
                               "file_name": document.filename, "mime_type": mime, "data": document.data,
                               "caption": caption, "params": params})
        return message
    def _m_getfile(self, params: dict[str, Any]) -> dict[str, Any]:
        with self._cond:
            found = self.files.get(str(params.get("file_id")))
        if found is None:
            raise TelegramAPIError(400, "Bad Request: invalid file_id")
        if str(params.get("file_id")) in self.too_big:  # the Bot API serves files up to 20 MB
            raise TelegramAPIError(400, "Bad Request: file is too big")
        unique, path, data = found
        return {"file_id": params["file_id"], "file_unique_id": unique, "file_size": len(data), "file_path": path}

    def _m_sendchataction(self, params: dict[str, Any]) -> bool:
        self.actions.append({"chat_id": params.get("chat_id"), "action": params.get("action")})
        return True

    def _m_setmycommands(self, params: dict[str, Any]) -> bool:
        self.commands.append(list(params.get("commands") or []))
        return True

    def _m_getmycommands(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        return self.commands[-1] if self.commands else []

    def _m_deletemycommands(self, params: dict[str, Any]) -> bool:
        self.commands.append([])
        return True

    def _m_setwebhook(self, params: dict[str, Any]) -> bool:
        self.webhook = {"url": params.get("url", ""), "secret_token": params.get("secret_token"),
                        "allowed_updates": params.get("allowed_updates")}
        if params.get("drop_pending_updates"):
            self._updates.clear()
        if self.webhook["url"]:
            for update in self._updates:
                self._deliver_webhook(update)
            self._updates.clear()
        else:
            self.webhook = None
        return True

    def _m_deletewebhook(self, params: dict[str, Any]) -> bool:
        self.webhook = None
        if params.get("drop_pending_updates"):
            self._updates.clear()
        return True

    def _m_getwebhookinfo(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"url": (self.webhook or {}).get("url", ""), "has_custom_certificate": False,
                "pending_update_count": len(self._updates)}

    def _m_deletemessage(self, params: dict[str, Any]) -> bool:
        return True

    def _m_close(self, params: dict[str, Any]) -> bool:
        return True

    def _m_logout(self, params: dict[str, Any]) -> bool:
        return True

    # --- webhook delivery --------------------------------------------------------------------
    def _deliver_webhook(self, update: dict[str, Any]) -> None:
        """POST ``update`` to the webhook from a helper thread (the bot may run on the caller's loop)."""
        hook = dict(self.webhook or {})
        if self.webhook_router is not None:
            self.webhook_router.submit(hook, update)
            return
        thread = threading.Thread(target=self._post_webhook, args=(hook, update), name="fake-telegram-webhook",
                                  daemon=True)
        self._delivery_threads.append(thread)
        thread.start()

    def _post_webhook(self, hook: dict[str, Any], update: dict[str, Any]) -> None:
        for attempt in range(self.webhook_retries + 1):
            if attempt:
                time.sleep(self.webhook_retry_delay)
            if 200 <= self._post_webhook_once(hook, update) < 300 or self._stopping:
                return

    def _post_webhook_once(self, hook: dict[str, Any], update: dict[str, Any]) -> int:
        headers = {"Content-Type": "application/json"}
        if hook.get("secret_token"):
            headers["X-Telegram-Bot-Api-Secret-Token"] = hook["secret_token"]
        req = urllib.request.Request(hook["url"], data=json.dumps(update).encode(), headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                status = resp.status
        except urllib.error.HTTPError as exc:
            exc.close()
            status = exc.code
        except (urllib.error.URLError, OSError) as exc:
            logger.debug("fake-telegram: webhook delivery failed: %s", exc)
            status = 0
        with self._cond:
            self.webhook_deliveries.append(status)
            self._cond.notify_all()
        return status


def _content(text: str, parse_mode: str | None) -> str:
    """A message's content for the "not modified" check: plain text compares as the HTML it equals."""
    return text if parse_mode and parse_mode.upper() == "HTML" else html.escape(text, quote=False)


def _make_handler(api: FakeTelegramAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as api.telegram.org
        # Headers and body are separate writes: with Nagle on, the body waits for the ACK of the headers,
        # which the client delays by up to 40 ms. Real servers set TCP_NODELAY too.
        disable_nagle_algorithm = True
        timeout = 60

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            logger.debug("fake-telegram: %s", format % args)

        def _reply(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (a cancelled long poll, a killed bot)
                self.close_connection = True

        def _error(self, code: int, description: str, parameters: dict[str, Any] | None = None) -> None:
            body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
            if parameters:
                body["parameters"] = parameters
            self._reply(code, body)

        def do_GET(self) -> None:
            self._handle(b"")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self._handle(self.rfile.read(length) if length else b"")

        def _handle(self, raw: bytes) -> None:
            url = urlsplit(self.path)
            parts = url.path.strip("/").split("/")
            if parts and parts[0] == "file":
                self._file(parts)
                return
            if len(parts) != 2 or not parts[0].startswith("bot"):
                self._error(404, "Not Found")
                return
            if parts[0][3:] != api.token:
                self._error(401, "Unauthorized")
                return
            params = decode_params(parse_qsl(url.query))
            params.update(self._body_params(raw))
            api._peer.value = self.client_address
            try:
                result = api.call(parts[1], params)
            except TelegramAPIError as exc:
                self._error(exc.code, exc.description, exc.parameters)
                return
            self._reply(200, {"ok": True, "result": result})

        def _file(self, parts: list[str]) -> None:
            """``GET /file/bot<token>/<file_path>``: the file's bytes as they are, as the real Bot API serves
            them; an unknown path or token is a 404 "Not Found" (JSON, as Telegram answers)."""
            if len(parts) < 3 or parts[1] != "bot" + api.token:
                self._error(404, "Not Found")
                return
            data = api.file_bytes("/".join(parts[2:]))
            if data is None:
                self._error(404, "Not Found")
                return
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _body_params(self, raw: bytes) -> dict[str, Any]:
            ctype = self.headers.get("Content-Type") or ""
            if not raw:
                return {}
            if ctype.startswith("application/json"):
                return json.loads(raw)
            if ctype.startswith("multipart/form-data"):
                msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                    b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + raw)
                pairs: list[tuple[str, str]] = []
                files: dict[str, UploadedFile] = {}
                for part in msg.iter_parts():
                    name = part.get_param("name", header="content-disposition")
                    payload = part.get_payload(decode=True) or b""
                    if part.get_filename():
                        files[name] = UploadedFile(part.get_filename(), part.get_content_type(), payload)
                    else:
                        pairs.append((name, payload.decode()))
                return {**decode_params(pairs), **files}
            return decode_params(parse_qsl(raw.decode(), keep_blank_values=True))

    return Handler


__all__ = ["FakeTelegramAPI", "TelegramAPIError", "UploadedFile", "decode_params", "utf16_len", "MAX_MESSAGE_LENGTH"]
