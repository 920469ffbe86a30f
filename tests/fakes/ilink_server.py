"""A fake of WeChat's bot API (iLink, the "ClawBot" protocol) on 127.0.0.1, for tests.

It speaks the protocol as Tencent's ``@tencent-weixin/openclaw-weixin`` package (2.4.9: ``src/api/api.ts``,
``src/auth/login-qr.ts``) and its users' reports give it: ``POST ilink/bot/get_bot_qrcode?bot_type=3`` with
``{"local_token_list"}`` (and the older ``GET`` form; :attr:`FakeILink.post_qrcode` False plays an older server
that answers the POST 404), ``GET ilink/bot/get_qrcode_status?qrcode=…[&verify_code=…]`` (held until the status
changes) with the plugin's statuses: ``wait``, ``scaned``, ``confirmed``, ``expired``, ``need_verifycode`` (the
phone shows :attr:`QrCodeState.verify`; a poll with the right ``verify_code`` moves on to ``scaned``, three wrong
ones to ``verify_code_blocked``), ``scaned_but_redirect`` (with ``redirect_host``: the fake's second port, its
"other IDC"), ``binded_redirect``; and the bot calls, all ``POST`` with JSON and ``base_info``: ``msg/notifystart``
and ``msg/notifystop``, ``getupdates`` (a long poll with an opaque ``get_updates_buf`` cursor and
``longpolling_timeout_ms``), ``sendmessage`` (``client_id``, ``context_token``, one text item), ``getconfig``
(``typing_ticket``) and ``sendtyping``. ``sendmessage`` answers ``ret -2`` as users report WeChat does: ``"prepare
failed"`` for a text over :attr:`FakeILink.max_text` characters (4,000 by default, the plugin's limit) and for a
context token older than :attr:`FakeILink.token_ttl_s` (24 hours), and a bare ``{"ret": -2}`` for the 11th reply
with one token (:data:`REPLIES_PER_TOKEN`); each refusal is kept in :attr:`FakeILink.refused`. And a file:
``getuploadurl`` (the upload's key, sizes and MD5), the CDN upload of the encrypted file, and ``sendmessage``
with one file item referring to it, kept in :attr:`FakeILink.files`. The CDN, on the same port, is
tests/fakes/ilink_cdn.py (:attr:`FakeILink.cdn`): what the bot uploads, and the photos and voice messages a user
sends (:meth:`FakeILink.push_image`, :meth:`FakeILink.push_voice`), kept encrypted as WeChat keeps them.
Every bot call must carry ``Content-Type: application/json``, ``AuthorizationType: ilink_bot_token``,
``Authorization: Bearer <token>`` and ``X-WECHAT-UIN`` (base64 of a decimal uint32); a request that does not is
answered 400 and recorded in :attr:`FakeILink.violations`. A token WeChat ended
(:meth:`FakeILink.end_session`) is answered ``{"ret": -14, "errcode": -14, "errmsg": "session timeout"}``.

The server runs aiohttp on its own event loop in a background thread, so sync tests (``app.py`` in a
subprocess) and async tests (the channel on the test's loop) use it alike::

    with FakeILink(hold_s=1) as api:
        api.wait_for_qr(1); api.confirm_qr()   # the scan and the confirmation on the phone
        api.push_text("alice@im.wechat", "hello")
        api.wait_sent("alice@im.wechat", 1)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.ilink_cdn import FakeCdn
from tests.fakes.loopback_server import LoopbackServer

SESSION_TIMEOUT = {"ret": -14, "errcode": -14, "errmsg": "session timeout"}
TEXT_LIMIT = 4000
#: replies one context token allows (users' reports: "one inbound message supports 10 replies")
REPLIES_PER_TOKEN = 10
PREPARE_FAILED = {"ret": -2, "errmsg": "prepare failed"}
#: wrong verify codes before the login is blocked
WRONG_CODES = 3


@dataclass
class QrCodeState:
    """One login QR code and where it stands."""

    qrcode: str
    content: str
    status: str = "wait"
    #: the status the last status poll reported
    reported: str = ""
    #: the number the phone shows while the status is ``need_verifycode``
    verify: str = "482913"
    #: the verify codes the bot sent, in order
    codes_given: list[str] = field(default_factory=list)
    #: confirm the login without ``ilink_bot_id`` (a failed login)
    without_bot_id: bool = False


@dataclass
class Sent:
    """One message the bot sent."""

    to: str
    text: str
    context_token: str
    client_id: str
    at: float = field(default_factory=time.monotonic)


def encode_cursor(seq: int) -> str:
    """The opaque ``get_updates_buf`` the fake hands out (base64 of JSON, like a real sync buffer)."""
    return base64.b64encode(json.dumps({"seq": seq}).encode()).decode()


def decode_cursor(cursor: str) -> int | None:
    """The sequence number in a cursor; None for one the fake did not hand out."""
    if not cursor:
        return 0
    try:
        return int(json.loads(base64.b64decode(cursor, validate=True))["seq"])
    except (binascii.Error, ValueError, KeyError, TypeError):
        return None


class FakeILink(LoopbackServer):
    """The iLink bot API with one bot; tests drive the phone side (scan, confirm, messages) from any thread.
    ``base_url`` is what ``weixin_base_url`` points at."""

    name = "fake iLink server"

    def __init__(self, *, hold_s: float = 35.0, qr_hold_s: float = 35.0, bot_id: str = "b0f1e2@im.bot") -> None:
        super().__init__()
        #: seconds a long poll (getupdates) and a QR status poll are held without news
        self.hold_s, self.qr_hold_s = hold_s, qr_hold_s
        self.bot_id = bot_id
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self.codes: list[QrCodeState] = []
        #: tokens issued by confirmed logins, and the ones WeChat ended since
        self.tokens: list[str] = []
        self.ended: set[str] = set()
        #: every message pushed, in order: (seq, message dict)
        self.queue: list[tuple[int, dict[str, Any]]] = []
        #: the highest seq a poll's cursor has confirmed
        self.confirmed = 0
        #: message_id -> how many times a getupdates answer carried it
        self.deliveries: dict[str, int] = {}
        self.context_tokens: dict[str, str] = {}  # context token -> user
        self.sent: list[Sent] = []
        self.typing: list[tuple[str, int]] = []
        self.tickets: dict[str, str] = {}
        self.violations: list[str] = []
        #: files the bot sent: {"to", "file_name", "data", "context_token"}
        self.files: list[dict[str, Any]] = []
        #: every request: (method, path)
        self.requests: list[tuple[str, str]] = []
        #: the CDN: files users sent (kept encrypted) and files the bot uploads, on this server's port
        self.cdn = FakeCdn(lambda: self.base_url, self.requests)
        #: answer the next n bot calls with HTTP 500 (a flaky gateway)
        self.fail_next = 0
        #: the sendmessage calls (1-based, counted over the fake's life) answered with HTTP 500
        self.fail_sendmessage: set[int] = set()
        self.sendmessage_calls = 0
        #: the longest text sendmessage takes, and how long a context token is good for (seconds)
        self.max_text = TEXT_LIMIT
        self.token_ttl_s = 24 * 3600.0
        #: context token -> (when its message came, replies sent with it)
        self.token_use: dict[str, list[float]] = {}
        #: sendmessage calls refused with ret -2: (to, text, context_token, why)
        self.refused: list[tuple[str, str, str, str]] = []
        #: the POST form of get_bot_qrcode is served (False: an older server, which answers it 404)
        self.post_qrcode = True
        #: each get_bot_qrcode request: (method, its local_token_list or None for a GET)
        self.qr_requests: list[tuple[str, list[str] | None]] = []
        #: notifystart / notifystop calls, in order
        self.notified: list[str] = []
        #: the port each QR status poll came to (the second one is the "other IDC" of scaned_but_redirect)
        self.status_ports: list[int] = []
        self.idc_port = 0
        self._stopping = False

    # --- lifecycle ------------------------------------------------------------------------------
    def _routes(self, app: web.Application) -> None:
        app.router.add_get("/ilink/bot/get_bot_qrcode", self._get_qrcode)
        app.router.add_post("/ilink/bot/get_bot_qrcode", self._post_qrcode)
        app.router.add_get("/ilink/bot/get_qrcode_status", self._qrcode_status)
        for name, handler in (("getupdates", self._getupdates), ("sendmessage", self._sendmessage),
                              ("getconfig", self._getconfig), ("sendtyping", self._sendtyping),
                              ("getuploadurl", self._getuploadurl), ("msg/notifystart", self._notifier("notifystart")),
                              ("msg/notifystop", self._notifier("notifystop"))):
            app.router.add_post(f"/ilink/bot/{name}", self._bot_call(name, handler))
        self.cdn.add_routes(app.router)

    async def _serving(self) -> None:
        self.idc_port = await self.add_site()  # the "other IDC" a scaned_but_redirect names

    def stop(self) -> None:
        """Stop serving; held polls end at once."""
        self._stopping = True
        super().stop()

    # --- the phone side (tests) -------------------------------------------------------------------
    def wait_for_qr(self, n: int, timeout: float = 15.0) -> QrCodeState:
        """Wait until the bot has asked for ``n`` QR codes; return the latest."""
        self._wait(lambda: len(self.codes) >= n, timeout, f"{n} QR codes")
        return self.codes[-1]

    def set_qr(self, status: str, **changes: Any) -> None:
        """Move the latest QR code to ``status`` (``scaned``, ``confirmed``, ``expired``, ``need_verifycode``,
        ``scaned_but_redirect``, ``binded_redirect``), with ``changes`` to its other fields."""
        with self._lock:
            for name, value in changes.items():
                setattr(self.codes[-1], name, value)
            self.codes[-1].status = status

    def confirm_qr(self) -> None:
        """Scan the latest code, then confirm the login on the phone."""
        self.set_qr("scaned")
        self._wait(lambda: self.codes[-1].reported == "scaned", 10, "the bot to see the scan")
        self.set_qr("confirmed")

    def end_session(self) -> None:
        """WeChat ends the bot's session: every issued token answers errcode -14 from now on."""
        with self._lock:
            self.ended.update(self.tokens)

    def push(self, user_id: str, items: list[dict[str, Any]], *, message_id: int | None = None,
             copies: int = 1) -> int:
        """A user sends a message (``copies`` > 1: the server delivers it that many times); returns its id."""
        with self._lock:
            seq = next(self._seq)
            mid = message_id if message_id is not None else 7_000_000_000_000_000_000 + seq  # a uint64 past 2**53
            token = f"ctx-{seq}-{secrets.token_hex(4)}"
            self.context_tokens[token] = user_id
            self.token_use[token] = [time.time()]
            msg = {"seq": seq, "message_id": mid, "from_user_id": user_id, "to_user_id": self.bot_id,
                   "client_id": "", "create_time_ms": int(time.time() * 1000), "session_id": f"s-{user_id}",
                   "message_type": 1, "message_state": 2, "item_list": items, "context_token": token}
            self.queue.append((seq, msg))
            for _ in range(copies - 1):
                self.queue.append((next(self._seq), msg))
        return mid

    def push_text(self, user_id: str, text: str, **kwargs: Any) -> int:
        """A user sends a text message."""
        return self.push(user_id, [{"type": 1, "text_item": {"text": text}}], **kwargs)

    def push_image(self, user_id: str, data: bytes, *, key_as: str = "raw", full_url: bool = True,
                   **kwargs: Any) -> int:
        """A user sends a photo (``data``, any image file's bytes), kept encrypted on the fake CDN."""
        media, item_key = self.cdn.media_ref(data, key_as=key_as, full_url=full_url)
        image: dict[str, Any] = {"media": media, "mid_size": len(data)}
        if item_key:
            image["aeskey"] = item_key
        return self.push(user_id, [{"type": 2, "image_item": image}], **kwargs)

    def push_voice(self, user_id: str, *, text: str = "", data: bytes = b"#!SILK_V3 fake", encode_type: int = 6,
                   **kwargs: Any) -> int:
        """A user sends a voice message: its audio on the fake CDN (SILK unless ``encode_type`` says otherwise)
        and WeChat's own transcript, when ``text`` is given."""
        media, _ = self.cdn.media_ref(data, key_as="hex")
        voice: dict[str, Any] = {"media": media, "encode_type": encode_type, "playtime": 2000}
        if text:
            voice["text"] = text
        return self.push(user_id, [{"type": 3, "voice_item": voice}], **kwargs)

    def sent_to(self, user_id: str) -> list[str]:
        """The texts the bot sent to ``user_id``, in order."""
        with self._lock:
            return [s.text for s in self.sent if s.to == user_id]

    def wait_sent(self, user_id: str, n: int, timeout: float = 15.0) -> list[str]:
        """Wait until the bot has sent ``n`` messages to ``user_id``; return their texts."""
        self._wait(lambda: len(self.sent_to(user_id)) >= n, timeout, f"{n} messages to {user_id}",
                   lambda: self.sent_to(user_id))
        return self.sent_to(user_id)

    def _wait(self, check: Any, timeout: float, what: str, show: Any = None) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited for {what}" + (f": {show()}" if show else ""))
            time.sleep(0.02)

    # --- login ----------------------------------------------------------------------------------------
    async def _get_qrcode(self, request: web.Request) -> web.Response:
        """The older GET form."""
        self.requests.append((request.method, request.path))
        self.qr_requests.append(("GET", None))
        return self._new_qrcode(request)

    async def _post_qrcode(self, request: web.Request) -> web.Response:
        """The plugin's form: a POST with the bot tokens kept on the client (no base_info, no Authorization)."""
        self.requests.append((request.method, request.path))
        if not self.post_qrcode:
            return web.Response(status=404, text="404: Not Found")
        problem = self._check_headers(request, token=False)
        if problem:
            return self._violation(f"get_bot_qrcode: {problem}")
        try:
            body = await request.json()
        except ValueError:
            return self._violation("get_bot_qrcode: the body is not JSON")
        tokens = body.get("local_token_list") if isinstance(body, dict) else None
        if not isinstance(tokens, list) or len(tokens) > 10 or not all(isinstance(t, str) for t in tokens):
            return self._violation(f"get_bot_qrcode: local_token_list is not a list of at most 10 tokens: {body!r}")
        self.qr_requests.append(("POST", list(tokens)))
        return self._new_qrcode(request)

    def _new_qrcode(self, request: web.Request) -> web.Response:
        if request.query.get("bot_type") != "3":
            return self._violation(f"get_bot_qrcode without bot_type=3: {request.query_string}")
        with self._lock:
            code = QrCodeState(qrcode=secrets.token_hex(16),
                               content=f"https://liteapp.weixin.qq.com/q/{secrets.token_hex(8)}?bot_type=3")
            self.codes.append(code)
        return web.json_response({"qrcode": code.qrcode, "qrcode_img_content": code.content, "ret": 0})

    async def _qrcode_status(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        self.status_ports.append(request.url.port or 0)
        code = next((c for c in self.codes if c.qrcode == request.query.get("qrcode")), None)
        if code is None:
            return self._violation("get_qrcode_status for an unknown qrcode")
        given = request.query.get("verify_code")
        if given is not None:
            with self._lock:
                code.codes_given.append(given)
                if code.status == "need_verifycode":
                    wrong = sum(c != code.verify for c in code.codes_given)
                    if given == code.verify:
                        code.status = "scaned"
                    elif wrong >= WRONG_CODES:
                        code.status = "verify_code_blocked"
                    code.reported = ""  # a code given is answered at once
        deadline = time.monotonic() + self.qr_hold_s
        while True:  # held until the status changes
            if code.status != code.reported or time.monotonic() >= deadline or self._stopping:
                break
            await asyncio.sleep(0.02)
        with self._lock:
            code.reported = code.status
            answer: dict[str, Any] = {"status": code.status, "ret": 0}
            if code.status == "scaned_but_redirect":
                answer["redirect_host"] = f"127.0.0.1:{self.idc_port}"
            if code.status == "confirmed" and not code.content.endswith("#used"):
                token = f"{secrets.token_hex(12)}@im.bot:{secrets.token_hex(16)}"
                self.tokens.append(token)
                code.content += "#used"
                answer.update(bot_token=token, ilink_bot_id=self.bot_id, baseurl=self.base_url,
                              ilink_user_id="owner@im.wechat")
                if code.without_bot_id:
                    del answer["ilink_bot_id"]
        return web.json_response(answer)

    # --- bot calls --------------------------------------------------------------------------------------
    def _violation(self, what: str) -> web.Response:
        self.violations.append(what)
        return web.json_response({"ret": -1, "errmsg": what}, status=400)

    def _bot_call(self, name: str, handler: Any) -> Any:
        async def call(request: web.Request) -> web.Response:
            self.requests.append((request.method, request.path))
            problem = self._check_headers(request)
            if problem:
                return self._violation(f"{name}: {problem}")
            try:
                body = await request.json()
            except ValueError:
                return self._violation(f"{name}: the body is not JSON")
            if not isinstance(body, dict) or not isinstance(body.get("base_info"), dict):
                return self._violation(f"{name}: no base_info")
            token = request.headers["Authorization"].removeprefix("Bearer ")
            if token in self.ended:
                return web.json_response(SESSION_TIMEOUT)
            if token not in self.tokens:
                return self._violation(f"{name}: a token the server never issued")
            if self.fail_next > 0:
                self.fail_next -= 1
                return web.Response(status=500, text="upstream error")
            if name == "sendmessage":
                with self._lock:
                    self.sendmessage_calls += 1
                    failing = self.sendmessage_calls in self.fail_sendmessage
                if failing:
                    return web.Response(status=502, text="<html>502 Bad Gateway</html>")
            return await handler(body)

        return call

    @staticmethod
    def _check_headers(request: web.Request, token: bool = True) -> str:
        headers = request.headers
        if headers.get("Content-Type", "").split(";")[0] != "application/json":
            return "Content-Type is not application/json"
        if headers.get("AuthorizationType") != "ilink_bot_token":
            return "AuthorizationType is not ilink_bot_token"
        if token and (not headers.get("Authorization", "").startswith("Bearer ") or len(headers["Authorization"]) <= 7):
            return "no Authorization: Bearer <token>"
        try:
            uin = base64.b64decode(headers.get("X-WECHAT-UIN", ""), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return "X-WECHAT-UIN is not base64"
        if not uin.isdigit() or int(uin) >= 2**32:
            return "X-WECHAT-UIN is not a uint32 in decimal"
        return ""

    async def _getupdates(self, body: dict[str, Any]) -> web.Response:
        cursor = body.get("get_updates_buf")
        after = decode_cursor(cursor) if isinstance(cursor, str) else None
        if after is None:
            return self._violation(f"getupdates with a cursor the server never gave: {cursor!r}")
        with self._lock:
            if cursor == "":  # a new poller starts after what a cursor confirmed
                after = self.confirmed
            self.confirmed = max(self.confirmed, after)
        deadline = time.monotonic() + self.hold_s
        while time.monotonic() < deadline and not self._stopping:
            with self._lock:
                batch = [(seq, msg) for seq, msg in self.queue if seq > after]
            if batch:
                break
            await asyncio.sleep(0.02)
        else:
            batch = []
        with self._lock:
            for _, msg in batch:
                key = str(msg["message_id"])
                self.deliveries[key] = self.deliveries.get(key, 0) + 1
        last = batch[-1][0] if batch else after
        return web.json_response({"ret": 0, "msgs": [msg for _, msg in batch], "get_updates_buf": encode_cursor(last),
                                  "longpolling_timeout_ms": int(self.hold_s * 1000)})

    async def _sendmessage(self, body: dict[str, Any]) -> web.Response:
        msg = body.get("msg")
        if not isinstance(msg, dict):
            return self._violation("sendmessage without msg")
        items = msg.get("item_list") or []
        problems = []
        if not msg.get("client_id") or any(s.client_id == msg["client_id"] for s in self.sent):
            problems.append("client_id missing or reused")
        if self.context_tokens.get(msg.get("context_token", "")) != msg.get("to_user_id"):
            problems.append("context_token is not one given with a message of to_user_id")
        if msg.get("message_type") != 2 or msg.get("message_state") != 2 or msg.get("from_user_id") != "":
            problems.append("message_type/message_state/from_user_id are not 2/2/''")
        if len(items) == 1 and items[0].get("type") == 4:
            return self._send_file(msg, items[0], problems)
        if len(items) != 1 or items[0].get("type") != 1 or not isinstance(items[0].get("text_item"), dict):
            problems.append("item_list is not one text item")
        text = str(((items or [{}])[0].get("text_item") or {}).get("text", ""))
        if problems:
            return self._violation("sendmessage: " + "; ".join(problems))
        token = msg["context_token"]
        with self._lock:
            issued, *replies = self.token_use[token]
            if len(text) > self.max_text:
                why, answer = "too long", PREPARE_FAILED
            elif time.time() - issued > self.token_ttl_s:
                why, answer = "token expired", PREPARE_FAILED
            elif len(replies) >= REPLIES_PER_TOKEN:
                why, answer = "token used up", {"ret": -2}
            else:
                why, answer = "", {"ret": 0}
                self.token_use[token].append(time.time())
                self.sent.append(Sent(msg["to_user_id"], text, token, msg["client_id"]))
            if why:
                self.refused.append((msg["to_user_id"], text, token, why))
        return web.json_response(answer)

    def use_up(self, context_token: str) -> None:
        """The user's message that brought ``context_token`` has had all its replies."""
        with self._lock:
            use = self.token_use[context_token]
            use.extend([time.time()] * max(0, REPLIES_PER_TOKEN - (len(use) - 1)))

    def revive(self, token: str) -> None:
        """A bot token WeChat ended works again (the bot is bound here still: ``binded_redirect``)."""
        with self._lock:
            self.ended.discard(token)

    def age_tokens(self, seconds: float) -> None:
        """Every context token issued so far is ``seconds`` older (a day passes without the user writing)."""
        with self._lock:
            for use in self.token_use.values():
                use[0] -= seconds

    def _notifier(self, event: str) -> Any:
        async def notify(body: dict[str, Any]) -> web.Response:
            with self._lock:
                self.notified.append(event)
            return web.json_response({"ret": 0})

        return notify

    # --- files: getuploadurl, the CDN, a file item -------------------------------------------------------
    async def _getuploadurl(self, body: dict[str, Any]) -> web.Response:
        problems = []
        filekey, aeskey = str(body.get("filekey") or ""), str(body.get("aeskey") or "")
        if not re.fullmatch(r"[0-9a-f]{32}", filekey) or not re.fullmatch(r"[0-9a-f]{32}", aeskey):
            problems.append("filekey and aeskey must be 16 bytes in hex")
        if body.get("media_type") not in (1, 2, 3):
            problems.append("media_type is not 1, 2 or 3")
        raw, size = body.get("rawsize"), body.get("filesize")
        if not isinstance(raw, int) or raw <= 0 or size != (raw // 16 + 1) * 16:
            problems.append("rawsize/filesize are not a size and its AES-ECB padded size")
        if not re.fullmatch(r"[0-9a-f]{32}", str(body.get("rawfilemd5") or "")) or not body.get("to_user_id"):
            problems.append("rawfilemd5 or to_user_id missing")
        if problems:
            return self._violation("getuploadurl: " + "; ".join(problems))
        param, url = self.cdn.announce(body)
        return web.json_response({"ret": 0, "upload_param": param, "upload_full_url": url})

    def _send_file(self, msg: dict[str, Any], item: dict[str, Any], problems: list[str]) -> web.Response:
        file_item = item.get("file_item") or {}
        media = file_item.get("media") or {}
        upload = self.cdn.uploaded.get(str(media.get("encrypt_query_param") or ""))
        if upload is None:
            problems.append("file_item.media.encrypt_query_param is no uploaded file's")
        else:
            if media.get("aes_key") != base64.b64encode(upload["aeskey"].encode()).decode():
                problems.append("aes_key is not base64 of the upload's hex key")
            if media.get("encrypt_type") != 1 or file_item.get("len") != str(upload["rawsize"]):
                problems.append("encrypt_type is not 1 or len is not the plain size as a string")
            if upload["to_user_id"] != msg.get("to_user_id") or not file_item.get("file_name"):
                problems.append("the upload was for another user, or file_name is missing")
        if problems:
            return self._violation("sendmessage: " + "; ".join(problems))
        assert upload is not None
        with self._lock:
            self.files.append({"to": msg["to_user_id"], "file_name": file_item["file_name"], "data": upload["data"],
                               "context_token": msg["context_token"]})
            self.sent.append(Sent(msg["to_user_id"], f"[file {file_item['file_name']}]", msg["context_token"],
                                  msg["client_id"]))
        return web.json_response({"ret": 0})

    async def _getconfig(self, body: dict[str, Any]) -> web.Response:
        user = str(body.get("ilink_user_id") or "")
        if not user:
            return self._violation("getconfig without ilink_user_id")
        ticket = self.tickets.setdefault(user, base64.b64encode(secrets.token_bytes(12)).decode())
        return web.json_response({"ret": 0, "typing_ticket": ticket})

    async def _sendtyping(self, body: dict[str, Any]) -> web.Response:
        user, status = str(body.get("ilink_user_id") or ""), body.get("status")
        if self.tickets.get(user) != body.get("typing_ticket") or status not in (1, 2):
            return self._violation("sendtyping with a wrong ticket or status")
        with self._lock:
            self.typing.append((user, status))
        return web.json_response({"ret": 0})
