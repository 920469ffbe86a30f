"""A small aiohttp client for WeChat's bot API (iLink, the "ClawBot" plugin's protocol).

The protocol, as Tencent's ``@tencent-weixin/openclaw-weixin`` package and its public descriptions give it:

- ``POST ilink/bot/get_bot_qrcode?bot_type=3`` ``{"local_token_list": [the bot tokens kept here, newest first,
  at most 10]}`` (no ``base_info``, no ``Authorization``) -> ``{"qrcode", "qrcode_img_content"}``: a login QR
  code; an older server that knows only ``GET ilink/bot/get_bot_qrcode?bot_type=3`` answers the POST 404/405;
- ``GET ilink/bot/get_qrcode_status?qrcode=…[&verify_code=…]`` (held up to about 35 s) -> ``{"status": "wait" |
  "scaned" | "confirmed" | "expired" | "scaned_but_redirect" | "need_verifycode" | "verify_code_blocked" |
  "binded_redirect", "bot_token", "ilink_bot_id", "baseurl", "ilink_user_id", "redirect_host"}``; after
  ``need_verifycode`` the next poll carries the number the phone shows as ``verify_code``;
- ``POST ilink/bot/msg/notifystart`` and ``ilink/bot/msg/notifystop`` ``{"base_info"}``: the bot starts and
  stops receiving (a failure is only logged);
- ``POST ilink/bot/getupdates`` ``{"get_updates_buf", "base_info"}`` (a long poll) -> ``{"ret", "msgs",
  "get_updates_buf", "longpolling_timeout_ms"}``;
- ``POST ilink/bot/sendmessage`` ``{"msg": {…, "client_id", "context_token", "item_list"}, "base_info"}``;
- ``POST ilink/bot/getconfig`` -> ``{"typing_ticket"}``, then ``POST ilink/bot/sendtyping`` (status 1 typing,
  2 cancel);
- a file: ``POST ilink/bot/getuploadurl`` ``{"filekey" (16 random bytes, hex), "media_type": 3, "to_user_id",
  "rawsize", "rawfilemd5", "filesize" (the encrypted size), "no_need_thumb": true, "aeskey" (hex)}`` ->
  ``{"upload_full_url"}`` or ``{"upload_param"}``; the file encrypted with AES-128-ECB (PKCS#7 padding) under
  that key is ``POST``ed (``application/octet-stream``) to ``upload_full_url``, or to
  ``<CDN>/upload?encrypted_query_param=<upload_param>&filekey=<filekey>``, which answers with the download
  parameter in its ``x-encrypted-param`` header; then ``sendmessage`` with one item ``{"type": 4,
  "file_item": {"media": {"encrypt_query_param", "aes_key" (base64 of the hex key), "encrypt_type": 1},
  "file_name", "len" (the plain size, a string)}}``.

- a photo or voice message a user sends refers to a file on the CDN: ``image_item``/``voice_item`` ``{"media":
  {"encrypt_query_param", "aes_key", "full_url"?}}`` (an image may carry its key as ``aeskey``, 32 hex digits;
  ``aes_key`` is base64 of the 16 key bytes or of their hex), fetched with ``GET <full_url>`` or ``GET
  <CDN>/download?encrypted_query_param=…`` and decrypted with AES-128-ECB; a voice item may carry WeChat's own
  transcript as ``text`` (its audio is SILK).

Every POST carries ``AuthorizationType: ilink_bot_token``, ``Authorization: Bearer <bot token>`` and
``X-WECHAT-UIN`` (base64 of a random uint32 in decimal). A non-zero ``ret`` or ``errcode`` is an error;
``-14`` means WeChat ended the session, and only a new QR login helps (:class:`SessionExpired`). ``sendmessage``
answers ``ret -2`` (often with ``errmsg`` "prepare failed", often with none) when it will not take a message: a text
too long for it, or a ``context_token`` used up (about 10 replies) or too old (about 24 hours after the user's last
message) (:class:`SendRefused`).

Exceptions::

    ILinkError              the API answered with a non-zero ret/errcode
     ├── SessionExpired     errcode -14: log in again
     └── SendRefused        ret -2 of sendmessage: shorter, or with a newer context token
    ILinkHTTPError          an HTTP status other than 200 (5xx are worth retrying)

Network failures are aiohttp's own (``aiohttp.ClientError``) and ``TimeoutError``. Nothing here logs the bot
token or the QR code's value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp

from core.errors import BotError

logger = logging.getLogger(__name__)

#: the ``bot_type`` of a personal account's bot (what the ClawBot plugin asks for)
BOT_TYPE = "3"
#: what we tell the server in ``base_info.channel_version`` and ``iLink-App-ClientVersion`` (0x00MMNNPP)
CHANNEL_VERSION = "1.0.0"
CLIENT_VERSION = str(1 << 16)
APP_ID = "bot"
#: the server holds a long poll about this long unless it says otherwise (``longpolling_timeout_ms``)
LONG_POLL_S = 35.0
#: seconds a client waits past the server's hold before it gives up on a long poll
POLL_MARGIN_S = 5.0
#: seconds an ordinary call (send, typing, config) may take
CALL_TIMEOUT_S = 15.0
#: seconds notifystart / notifystop may take (the plugin's lightweight-call timeout)
NOTIFY_TIMEOUT_S = 10.0
#: HTTP statuses of a server that does not know the POST form of get_bot_qrcode
OLD_SERVER = (404, 405, 501)
#: errcode: WeChat ended the bot's session
SESSION_EXPIRED = -14
#: ret of a message WeChat will not take ("prepare failed": too long, or its context token is used up or old)
SEND_REFUSED = -2
#: the most bot tokens a QR code request names in ``local_token_list``
LOCAL_TOKENS = 10
#: item types of a message
TEXT_ITEM, IMAGE_ITEM, VOICE_ITEM, FILE_ITEM, VIDEO_ITEM = 1, 2, 3, 4, 5
#: message_type: sent by a person, sent by a bot; message_state: finished
USER_MESSAGE, BOT_MESSAGE, FINISHED = 1, 2, 2
TYPING, TYPING_CANCEL = 1, 2
#: getuploadurl's media_type of a file (1 image, 2 video); a media reference's encrypt_type (AES-128-ECB)
FILE_MEDIA, AES_ECB = 3, 1
#: where files are uploaded when getuploadurl gives an ``upload_param`` only
CDN_BASE_URL = "https://novac2c.cdn.weixin.qq.com/c2c"
#: seconds a file upload to the CDN may take
UPLOAD_TIMEOUT_S = 300.0


def encrypt_file(data: bytes, key: bytes) -> bytes:
    """``data`` encrypted with AES-128-ECB and PKCS#7 padding, as WeChat's CDN stores files."""
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    padder = padding.PKCS7(128).padder()
    padded = padder.update(data) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()  # noqa: S305 - WeChat's CDN protocol
    return encryptor.update(padded) + encryptor.finalize()


def decrypt_file(data: bytes, key: bytes) -> bytes:
    """The plain bytes of a file WeChat's CDN keeps encrypted (AES-128-ECB, PKCS#7); ValueError when ``data``
    is not that (wrong key, cut short)."""
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    if not data or len(data) % 16:
        raise ValueError(f"{len(data)} bytes are no AES-128-ECB ciphertext")
    decryptor = Cipher(algorithms.AES(key), modes.ECB()).decryptor()  # noqa: S305 - WeChat's CDN protocol
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(decryptor.update(data) + decryptor.finalize()) + unpadder.finalize()


def media_key(media: dict[str, Any], hex_key: str = "") -> bytes:
    """The AES key of a media reference: an image item's own ``aeskey`` (32 hex digits) when given, else the
    reference's ``aes_key``, which is base64 of either the 16 key bytes (images) or their 32 hex digits (files,
    voice, video). ValueError when neither gives 16 bytes."""
    hex_key = hex_key.strip()
    if len(hex_key) == 32:
        try:
            return bytes.fromhex(hex_key)
        except ValueError:
            pass
    try:
        decoded = base64.b64decode(str(media.get("aes_key") or ""), validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if len(decoded) == 16:
        return decoded
    if len(decoded) == 32:
        try:
            return bytes.fromhex(decoded.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            pass
    raise ValueError("the media reference carries no usable AES key")


def cdn_download_url(media: dict[str, Any], base: str = CDN_BASE_URL) -> str:
    """Where a media reference's file is fetched: its ``full_url`` when the server gave one, else the CDN's
    ``download`` with the reference's ``encrypt_query_param``."""
    full = str(media.get("full_url") or "").strip()
    if full:
        return full
    param = str(media.get("encrypt_query_param") or "").strip()
    if not param:
        raise ValueError("the media reference has no download parameter")
    return f"{base}/download?encrypted_query_param={quote(param, safe='')}"


def cdn_upload_url(upload_param: str, filekey: str, base: str = CDN_BASE_URL) -> str:
    """The CDN address of an upload that getuploadurl described by ``upload_param`` only."""
    return f"{base}/upload?encrypted_query_param={quote(upload_param, safe='')}&filekey={quote(filekey, safe='')}"


class ILinkError(BotError):
    """The API answered with a non-zero ``ret`` or ``errcode``."""

    def __init__(self, what: str, ret: int, errcode: int, errmsg: str) -> None:
        super().__init__(f"{what}: ret={ret} errcode={errcode} {errmsg}".rstrip())
        self.ret, self.errcode, self.errmsg = ret, errcode, errmsg


class SessionExpired(ILinkError):
    """errcode -14: WeChat ended the bot's session; only a new QR login helps."""


class SendRefused(ILinkError):
    """ret -2 of ``sendmessage``: WeChat will not take this message (too long, or its context token is used up
    or too old)."""


class ILinkHTTPError(BotError):
    """The API answered with an HTTP status other than 200."""

    def __init__(self, what: str, status: int) -> None:
        super().__init__(f"{what}: HTTP {status}")
        self.status = status


@dataclass(frozen=True, slots=True)
class QrCode:
    """A login QR code: ``qrcode`` polls its status (keep it private), ``content`` is what the code shows."""

    qrcode: str
    content: str


@dataclass(frozen=True, slots=True)
class Updates:
    """One long poll's answer."""

    msgs: list[dict[str, Any]] = field(default_factory=list)
    #: the cursor to send next ("" when the server sent none: keep the old one)
    cursor: str = ""
    #: how long the server wants to hold the next poll, in seconds (None: unchanged)
    hold_s: float | None = None


def wechat_uin() -> str:
    """The ``X-WECHAT-UIN`` header: a random uint32, in decimal, base64-encoded."""
    return base64.b64encode(str(secrets.randbits(32)).encode()).decode()


def check(what: str, data: Any) -> dict[str, Any]:
    """The answer as a dict; raise :class:`ILinkError` (or :class:`SessionExpired`) on a non-zero ret/errcode."""
    if not isinstance(data, dict):
        raise ILinkError(what, -1, -1, "the answer is not a JSON object")
    ret, errcode = _int(data.get("ret")), _int(data.get("errcode"))
    if SESSION_EXPIRED in (ret, errcode):
        raise SessionExpired(what, ret, errcode, str(data.get("errmsg") or ""))
    if what == "sendmessage" and ret == SEND_REFUSED:
        raise SendRefused(what, ret, errcode, str(data.get("errmsg") or ""))
    if ret or errcode:
        raise ILinkError(what, ret, errcode, str(data.get("errmsg") or ""))
    return data


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return -1


class ILinkClient:
    """The iLink HTTP API at one base URL, with one bot token (empty before login)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, token: str = "") -> None:
        self.session = session
        self.base_url = base_url.rstrip("/")
        self.token = token

    def _url(self, path: str) -> str:
        return f"{self.base_url}/{path}"

    @staticmethod
    def _app_headers() -> dict[str, str]:
        return {"iLink-App-Id": APP_ID, "iLink-App-ClientVersion": CLIENT_VERSION}

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "AuthorizationType": "ilink_bot_token",
                   "X-WECHAT-UIN": wechat_uin(), **self._app_headers()}
        if self.token:  # the plugin sends none before a login (get_bot_qrcode)
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    async def _get(self, what: str, path: str, params: dict[str, str], limit_s: float) -> dict[str, Any]:
        async with self.session.get(self._url(path), params=params, headers=self._app_headers(),
                                    timeout=aiohttp.ClientTimeout(total=limit_s)) as resp:
            if resp.status != 200:
                raise ILinkHTTPError(what, resp.status)
            return check(what, await resp.json(content_type=None))

    async def _post(self, what: str, path: str, body: dict[str, Any], limit_s: float, *,
                    params: dict[str, str] | None = None, base_info: bool = True) -> dict[str, Any]:
        if base_info:
            body = {**body, "base_info": {"channel_version": CHANNEL_VERSION}}
        async with self.session.post(self._url(path), json=body, headers=self._headers(), params=params,
                                     timeout=aiohttp.ClientTimeout(total=limit_s)) as resp:
            if resp.status != 200:
                raise ILinkHTTPError(what, resp.status)
            text = await resp.text()
        # sendmessage may answer with an empty body or "{}"
        return check(what, _json(text) if text.strip() else {})

    # --- login ----------------------------------------------------------------------------------
    async def get_qrcode(self, local_tokens: list[str] | None = None) -> QrCode:
        """A fresh login QR code, asked for as the plugin does (a POST naming the bot tokens kept here, so WeChat
        can tell a bot it knows); an older server that has only the GET form is asked that way."""
        what, path, params = "get_bot_qrcode", "ilink/bot/get_bot_qrcode", {"bot_type": BOT_TYPE}
        try:
            data = await self._post(what, path, {"local_token_list": (local_tokens or [])[:LOCAL_TOKENS]},
                                    CALL_TIMEOUT_S, params=params, base_info=False)
        except ILinkHTTPError as exc:
            if exc.status not in OLD_SERVER:
                raise
            data = await self._get(what, path, params, CALL_TIMEOUT_S)
        qrcode, content = str(data.get("qrcode") or ""), str(data.get("qrcode_img_content") or "")
        if not qrcode or not content:
            raise ILinkError("get_bot_qrcode", -1, -1, "no QR code in the answer")
        return QrCode(qrcode, content)

    async def qrcode_status(self, qrcode: str, verify_code: str = "", hold_s: float = LONG_POLL_S) -> dict[str, Any]:
        """The QR code's status (held by the server until it changes or about 35 s pass); "wait" when the
        hold ends without an answer. ``verify_code``: the number the phone showed, after ``need_verifycode``."""
        params = {"qrcode": qrcode, **({"verify_code": verify_code} if verify_code else {})}
        try:
            return await self._get("get_qrcode_status", "ilink/bot/get_qrcode_status", params, hold_s + POLL_MARGIN_S)
        except TimeoutError:
            return {"status": "wait"}

    async def notify(self, event: str) -> None:
        """Tell WeChat the bot starts (``notifystart``) or stops (``notifystop``) receiving, as the plugin does
        around its long poll."""
        await self._post(event, f"ilink/bot/msg/{event}", {}, NOTIFY_TIMEOUT_S)

    # --- messages -------------------------------------------------------------------------------
    async def get_updates(self, cursor: str, hold_s: float = LONG_POLL_S) -> Updates:
        """Long-poll for messages after ``cursor``; a hold that ends without an answer is an empty batch."""
        try:
            data = await self._post("getupdates", "ilink/bot/getupdates", {"get_updates_buf": cursor},
                                    hold_s + POLL_MARGIN_S)
        except TimeoutError:
            return Updates(cursor=cursor)
        msgs = data.get("msgs") or []
        hold = data.get("longpolling_timeout_ms")
        return Updates(msgs=[m for m in msgs if isinstance(m, dict)] if isinstance(msgs, list) else [],
                       cursor=str(data.get("get_updates_buf") or ""),
                       hold_s=hold / 1000 if isinstance(hold, int | float) and hold > 0 else None)

    async def send_text(self, to_user_id: str, text: str, context_token: str) -> str:
        """Send one finished text message in reply to a message's ``context_token``; returns its client_id."""
        return await self._send_item(to_user_id, {"type": TEXT_ITEM, "text_item": {"text": text}}, context_token)

    async def _send_item(self, to_user_id: str, item: dict[str, Any], context_token: str) -> str:
        client_id = uuid.uuid4().hex
        msg = {"from_user_id": "", "to_user_id": to_user_id, "client_id": client_id,
               "message_type": BOT_MESSAGE, "message_state": FINISHED, "context_token": context_token,
               "item_list": [item]}
        await self._post("sendmessage", "ilink/bot/sendmessage", {"msg": msg}, CALL_TIMEOUT_S)
        return client_id

    async def send_file(self, to_user_id: str, filename: str, data: bytes, context_token: str) -> str:
        """Upload ``data`` encrypted to WeChat's CDN and send it as a file named ``filename``; returns the
        message's client_id."""
        key, filekey = secrets.token_bytes(16), secrets.token_hex(16)
        encrypted = encrypt_file(data, key)
        answer = await self._post("getuploadurl", "ilink/bot/getuploadurl", {
            "filekey": filekey, "media_type": FILE_MEDIA, "to_user_id": to_user_id, "rawsize": len(data),
            "rawfilemd5": hashlib.md5(data).hexdigest(), "filesize": len(encrypted),  # noqa: S324 - the protocol's
            "no_need_thumb": True, "aeskey": key.hex()}, CALL_TIMEOUT_S)
        url = str(answer.get("upload_full_url") or "").strip()
        param = str(answer.get("upload_param") or "").strip()
        if not url and not param:
            raise ILinkError("getuploadurl", -1, -1, "no upload address in the answer")
        async with self.session.post(url or cdn_upload_url(param, filekey), data=encrypted,
                                     headers={"Content-Type": "application/octet-stream"},
                                     timeout=aiohttp.ClientTimeout(total=UPLOAD_TIMEOUT_S)) as resp:
            if resp.status != 200:
                logger.warning("weixin: the CDN refused the upload: HTTP %d %s", resp.status,
                               resp.headers.get("x-error-message", ""))
                raise ILinkHTTPError("cdn upload", resp.status)
            download = resp.headers.get("x-encrypted-param", "").strip()
        if not download:
            raise ILinkError("cdn upload", -1, -1, "no x-encrypted-param in the answer")
        media = {"encrypt_query_param": download, "aes_key": base64.b64encode(key.hex().encode()).decode(),
                 "encrypt_type": AES_ECB}
        item = {"type": FILE_ITEM, "file_item": {"media": media, "file_name": filename, "len": str(len(data))}}
        return await self._send_item(to_user_id, item, context_token)

    async def download(self, media: dict[str, Any], *, hex_key: str = "", limit: int,
                       cdn_base: str = CDN_BASE_URL) -> bytes:
        """A file a message refers to (``media``: its ``encrypt_query_param``/``full_url`` and ``aes_key``),
        fetched from WeChat's CDN and decrypted; at most ``limit`` bytes are read (ValueError past that)."""
        key = media_key(media, hex_key)
        async with self.session.get(cdn_download_url(media, cdn_base),
                                    timeout=aiohttp.ClientTimeout(total=UPLOAD_TIMEOUT_S)) as resp:
            if resp.status != 200:
                raise ILinkHTTPError("cdn download", resp.status)
            declared = resp.content_length
            if declared is not None and declared > limit + 16:
                raise ValueError(f"the file is {declared:,} bytes; at most {limit:,} are fetched")
            encrypted = bytearray()
            async for chunk in resp.content.iter_chunked(64 * 1024):
                encrypted += chunk
                if len(encrypted) > limit + 16:
                    raise ValueError(f"the file is over {limit:,} bytes; at most {limit:,} are fetched")
        return decrypt_file(bytes(encrypted), key)

    async def typing_ticket(self, user_id: str, context_token: str) -> str:
        """The ticket that lets the bot show "typing…" to ``user_id``."""
        data = await self._post("getconfig", "ilink/bot/getconfig",
                                {"ilink_user_id": user_id, "context_token": context_token}, CALL_TIMEOUT_S)
        return str(data.get("typing_ticket") or "")

    async def send_typing(self, user_id: str, ticket: str, status: int = TYPING) -> None:
        """Show (status 1) or cancel (status 2) "typing…" in the user's chat."""
        await self._post("sendtyping", "ilink/bot/sendtyping",
                         {"ilink_user_id": user_id, "typing_ticket": ticket, "status": status}, CALL_TIMEOUT_S)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ILinkError("answer", -1, -1, f"not JSON ({exc})") from None
