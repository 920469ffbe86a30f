"""A fake of WeCom's (企业微信) server API and a sender of its app callbacks, on 127.0.0.1, for tests.

Built from WeCom's public developer documents (developer.work.weixin.qq.com):

- ``GET /cgi-bin/gettoken?corpid=…&corpsecret=…`` → ``{"errcode": 0, "errmsg": "ok", "access_token": …,
  "expires_in": 7200}``; a wrong secret is errcode 40001 ("invalid credential"), a wrong corp id 40013.
- Every other call takes ``?access_token=…``: an unknown token is 40014 ("invalid access_token"), an expired one
  42001 ("access_token expired"). With :attr:`FakeWecomAPI.trusted_ips` set and this client not in it, calls
  answer 60020 ("not allow to access from your ip"), as an app with a trusted-IP list does.
- ``GET /cgi-bin/agent/get?agentid=…``: the app; another agent id is 40056 ("invalid agentid").
- ``POST /cgi-bin/message/send`` (JSON: ``touser``, ``msgtype`` ``"text"``, ``agentid``, ``text.content``) and
  ``POST /cgi-bin/appchat/send`` (``chatid``, ``msgtype``, ``text.content``): a text over 2,048 bytes is errcode
  45002 ("content size out of limit"); an unknown chat 86003 ("chat not found").
- ``GET /cgi-bin/media/get?media_id=…``: the file's bytes (or 40007 "invalid media_id" as JSON).

The callbacks (:class:`CallbackSender`) are encrypted and signed as WeCom's "加解密方案说明" describes, written
here from that description and not with wechatpy (which the bot uses to check them): AES-256-CBC with the key
``base64(EncodingAESKey + "=")`` and the IV its first 16 bytes; the plaintext is 16 random bytes, the message's
length (4 bytes, network order), the message, then the corp id, PKCS#7-padded to a multiple of 32 bytes; the
``msg_signature`` is the SHA-1 of the sorted token, timestamp, nonce and ``Encrypt`` joined. The POST body is
``<xml><ToUserName>…</ToUserName><AgentID>…</AgentID><Encrypt>…</Encrypt></xml>``.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import secrets
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit
from xml.sax.saxutils import escape

import httpx
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.fakes.http_server import FakeService

TEXT_LIMIT = 2048
ERRORS = {
    40001: "invalid credential, hint: [1700000000_1_xxx], from ip: 127.0.0.1, more info at "
           "https://open.work.weixin.qq.com/devtool/query?e=40001",
    40013: "invalid corpid, hint: [1700000000_2_xxx], from ip: 127.0.0.1, more info at "
           "https://open.work.weixin.qq.com/devtool/query?e=40013",
    40014: "invalid access_token, hint: [1700000000_3_xxx], from ip: 127.0.0.1, more info at "
           "https://open.work.weixin.qq.com/devtool/query?e=40014",
    42001: "access_token expired, hint: [1700000000_4_xxx], from ip: 127.0.0.1, more info at "
           "https://open.work.weixin.qq.com/devtool/query?e=42001",
    40056: "invalid agentid, hint: [1700000000_5_xxx], from ip: 127.0.0.1",
    40007: "invalid media_id, hint: [1700000000_6_xxx], from ip: 127.0.0.1",
    45002: "content size out of limit, hint: [1700000000_7_xxx], from ip: 127.0.0.1",
    86003: "chat not found, hint: [1700000000_8_xxx], from ip: 127.0.0.1",
    60020: "not allow to access from your ip, hint: [1700000000_9_xxx], from ip: 127.0.0.1, more info at "
           "https://open.work.weixin.qq.com/devtool/query?e=60020",
}


def new_aes_key() -> str:
    """A fresh EncodingAESKey: 43 characters, the base64 of 32 bytes without its "="."""
    return base64.b64encode(os.urandom(32)).decode()[:-1]


def signature(token: str, timestamp: str, nonce: str, encrypt: str) -> str:
    """WeCom's msg_signature: SHA-1 of the four strings sorted and joined."""
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypt])).encode()).hexdigest()  # noqa: S324


def encrypt(aes_key: str, corp_id: str, message: str) -> str:
    """WeCom's Encrypt value of ``message`` (see the module docstring)."""
    key = base64.b64decode(aes_key + "=")
    body = message.encode("utf-8")
    plain = os.urandom(16) + struct.pack(">I", len(body)) + body + corp_id.encode()
    pad = 32 - len(plain) % 32
    plain += bytes([pad]) * pad
    encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return base64.b64encode(encryptor.update(plain) + encryptor.finalize()).decode()


def decrypt(aes_key: str, value: str) -> tuple[str, str]:
    """(message, receiver id) of an Encrypt value (to check what a server answers, e.g. the URL check)."""
    key = base64.b64decode(aes_key + "=")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    plain = decryptor.update(base64.b64decode(value)) + decryptor.finalize()
    plain = plain[:-plain[-1]]
    length = struct.unpack(">I", plain[16:20])[0]
    return plain[20:20 + length].decode(), plain[20 + length:].decode()


def _cdata(value: str) -> str:
    return "<![CDATA[" + value.replace("]]>", "]]]]><![CDATA[>") + "]]>"


def text_message(*, corp_id: str, agent_id: str, user_id: str, content: str, msg_id: str,
                 chat_id: str = "", created: int | None = None) -> str:
    """The decrypted XML of a text message to the app (a group one carries ``ChatId`` and ``ChatType``)."""
    group = f"<ChatId>{_cdata(chat_id)}</ChatId><ChatType>{_cdata('group')}</ChatType>" if chat_id else ""
    return (f"<xml><ToUserName>{_cdata(corp_id)}</ToUserName><FromUserName>{_cdata(user_id)}</FromUserName>"
            f"<CreateTime>{created or int(time.time())}</CreateTime><MsgType>{_cdata('text')}</MsgType>"
            f"<Content>{_cdata(content)}</Content><MsgId>{escape(msg_id)}</MsgId><AgentID>{escape(agent_id)}</AgentID>"
            f"{group}</xml>")


def media_message(*, corp_id: str, agent_id: str, user_id: str, kind: str, media_id: str, msg_id: str,
                  recognition: str = "") -> str:
    """The decrypted XML of a photo (``image``: ``PicUrl``, ``MediaId``) or a voice message (``voice``: ``MediaId``,
    ``Format`` amr, and ``Recognition`` when WeCom transcribed it)."""
    fields = (f"<PicUrl>{_cdata('https://wework.qpic.cn/' + media_id)}</PicUrl>" if kind == "image" else
              f"<Format>{_cdata('amr')}</Format>"
              + (f"<Recognition>{_cdata(recognition)}</Recognition>" if recognition else ""))
    return (f"<xml><ToUserName>{_cdata(corp_id)}</ToUserName><FromUserName>{_cdata(user_id)}</FromUserName>"
            f"<CreateTime>{int(time.time())}</CreateTime><MsgType>{_cdata(kind)}</MsgType>{fields}"
            f"<MediaId>{_cdata(media_id)}</MediaId><MsgId>{escape(msg_id)}</MsgId><AgentID>{escape(agent_id)}</AgentID>"
            "</xml>")


@dataclass
class CallbackSender:
    """Posts WeCom's callbacks to a bot's URL, encrypted and signed as WeCom does."""

    url: str
    token: str
    aes_key: str
    corp_id: str
    agent_id: str
    _ids = itertools.count(7_300_000_000_000_000_001)

    def signed(self, inner: str, *, wrong_signature: bool = False) -> tuple[dict[str, str], bytes]:
        """(query, body) of one callback carrying ``inner``."""
        timestamp, nonce = str(int(time.time())), secrets.token_hex(5)
        enc = encrypt(self.aes_key, self.corp_id, inner)
        sig = signature(self.token, timestamp, nonce, enc)
        if wrong_signature:
            sig = signature("not-the-token", timestamp, nonce, enc)
        body = (f"<xml><ToUserName>{_cdata(self.corp_id)}</ToUserName><AgentID>{_cdata(self.agent_id)}</AgentID>"
                f"<Encrypt>{_cdata(enc)}</Encrypt></xml>").encode()
        return {"msg_signature": sig, "timestamp": timestamp, "nonce": nonce}, body

    def post(self, inner: str, *, wrong_signature: bool = False, timeout: float = 10.0) -> httpx.Response:
        query, body = self.signed(inner, wrong_signature=wrong_signature)
        return httpx.post(self.url + "?" + urlencode(query), content=body, timeout=timeout,
                          headers={"Content-Type": "text/xml"})

    def text(self, user_id: str, content: str, *, chat_id: str = "", msg_id: str | None = None,
             wrong_signature: bool = False) -> tuple[str, httpx.Response]:
        """Post a text message; returns (its MsgId, the bot's response)."""
        msg_id = msg_id or str(next(self._ids))
        inner = text_message(corp_id=self.corp_id, agent_id=self.agent_id, user_id=user_id, content=content,
                             msg_id=msg_id, chat_id=chat_id)
        return msg_id, self.post(inner, wrong_signature=wrong_signature)

    def media(self, user_id: str, kind: str, media_id: str, *, recognition: str = "") -> httpx.Response:
        """Post a photo or a voice message whose file the fake API serves under ``media_id``."""
        return self.post(media_message(corp_id=self.corp_id, agent_id=self.agent_id, user_id=user_id, kind=kind,
                                       media_id=media_id, msg_id=str(next(self._ids)), recognition=recognition))

    def verify_url(self, echo: str = "echo-1234") -> tuple[str, httpx.Response]:
        """WeCom's URL check (GET with an encrypted ``echostr``); returns (the plain echo, the response)."""
        timestamp, nonce = str(int(time.time())), secrets.token_hex(5)
        enc = encrypt(self.aes_key, self.corp_id, echo)
        query = {"msg_signature": signature(self.token, timestamp, nonce, enc), "timestamp": timestamp,
                 "nonce": nonce, "echostr": enc}
        return echo, httpx.get(self.url + "?" + urlencode(query), timeout=10.0)


class FakeWecomAPI(FakeService):
    """WeCom's server API for one corp and one self-built app (see the module docstring)."""

    thread_name = "fake-wecom"

    def __init__(self, *, corp_id: str = "ww0123456789abcdef", agent_id: str = "1000002",
                 secret: str = "app-secret-0123456789", expires_in: int = 7200) -> None:
        super().__init__()
        self.corp_id, self.agent_id, self.secret, self.expires_in = corp_id, agent_id, secret, expires_in
        #: addresses allowed to call (None: any); others get 60020
        self.trusted_ips: set[str] | None = None
        self.chats: set[str] = set()
        self.media: dict[str, tuple[bytes, str]] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._tokens: dict[str, float] = {}
        #: every gettoken call that returned a token
        self.tokens_issued = 0
        #: every message sent: {"to": user id or "chat:<chat id>", "text": …, "body": the JSON}
        self.sent: list[dict[str, Any]] = []
        #: every call: (path, query)
        self.calls: list[tuple[str, dict[str, str]]] = []

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return _make_handler(self)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def expire_tokens(self) -> None:
        """Every token issued so far expires now (the next call with one gets 42001)."""
        with self._lock:
            for token in self._tokens:
                self._tokens[token] = 0.0

    def sent_to(self, to: str) -> list[str]:
        with self._lock:
            return [m["text"] for m in self.sent if m["to"] == to]

    def wait_sent(self, to: str, n: int, timeout: float = 15.0) -> list[str]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while len([m for m in self.sent if m["to"] == to]) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{n} message(s) to {to} not sent; sent: {self.sent}")
                self._changed.wait(left)
            return [m["text"] for m in self.sent if m["to"] == to]

    # --- the API --------------------------------------------------------------------------------------------
    def answer(self, method: str, path: str, query: dict[str, str], body: bytes, client: str) -> tuple[int, Any]:
        with self._lock:
            self.calls.append((path, query))
        if path == "/cgi-bin/gettoken":
            if query.get("corpid") != self.corp_id:
                return 200, _error(40013)
            if query.get("corpsecret") != self.secret:
                return 200, _error(40001)
            token = secrets.token_urlsafe(48)
            with self._lock:
                self._tokens[token] = time.time() + self.expires_in
                self.tokens_issued += 1
            return 200, {"errcode": 0, "errmsg": "ok", "access_token": token, "expires_in": self.expires_in}
        if not path.startswith("/cgi-bin/"):
            return 404, b"not found"
        if self.trusted_ips is not None and client not in self.trusted_ips:
            return 200, _error(60020)
        with self._lock:
            until = self._tokens.get(query.get("access_token", ""))
        if until is None:
            return 200, _error(40014)
        if until < time.time():
            return 200, _error(42001)
        if path == "/cgi-bin/agent/get" and method == "GET":
            if query.get("agentid") != self.agent_id:
                return 200, _error(40056)
            return 200, {"errcode": 0, "errmsg": "ok", "agentid": int(self.agent_id), "name": "longchat",
                         "square_logo_url": "", "description": "", "allow_userinfos": {"user": []},
                         "allow_partys": {"partyid": [1]}, "allow_tags": {"tagid": []}, "close": 0,
                         "redirect_domain": "", "report_location_flag": 0, "isreportenter": 0, "home_url": ""}
        if path == "/cgi-bin/media/get" and method == "GET":
            item = self.media.get(query.get("media_id", ""))
            if item is None:
                return 200, _error(40007)
            return 200, item
        if method != "POST" or path not in ("/cgi-bin/message/send", "/cgi-bin/appchat/send"):
            return 404, b"not found"
        try:
            data = json.loads(body)
        except ValueError:
            return 200, {"errcode": 47001, "errmsg": "data format error"}
        content = str((data.get("text") or {}).get("content") or "")
        if data.get("msgtype") != "text" or not content:
            return 200, {"errcode": 44004, "errmsg": "empty content"}
        if len(content.encode("utf-8")) > TEXT_LIMIT:
            return 200, _error(45002)
        if path == "/cgi-bin/message/send":
            if str(data.get("agentid")) != self.agent_id:
                return 200, _error(40056)
            to = str(data.get("touser") or "")
            result = {"errcode": 0, "errmsg": "ok", "invaliduser": "", "msgid": secrets.token_hex(16)}
        else:
            chat = str(data.get("chatid") or "")
            if chat not in self.chats:
                return 200, _error(86003)
            to = "chat:" + chat
            result = {"errcode": 0, "errmsg": "ok"}
        with self._changed:
            self.sent.append({"to": to, "text": content, "body": data})
            self._changed.notify_all()
        return 200, result


def _error(code: int) -> dict[str, Any]:
    return {"errcode": code, "errmsg": ERRORS[code]}


def _make_handler(fake: FakeWecomAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, payload = fake.answer(method, parts.path, query, body, self.client_address[0])
            if isinstance(payload, tuple):
                raw, ctype = payload
            elif isinstance(payload, bytes):
                raw, ctype = payload, "text/plain"
            else:
                raw, ctype = json.dumps(payload, ensure_ascii=False).encode(), "application/json; charset=UTF-8"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler
