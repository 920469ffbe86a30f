"""WeChat's CDN for the fake iLink server (tests/fakes/ilink_server.py), on its port: files AES-128-ECB
encrypted, both ways, as Tencent's ``@tencent-weixin/openclaw-weixin`` plugin uses them.

Down: a file a user sends (a photo, a voice message) is kept encrypted under a fresh key (:meth:`FakeCdn.put`),
and its message's reference carries the key in one of the forms WeChat sends (:meth:`FakeCdn.media_ref`);
``GET /c2c/download?encrypted_query_param=…`` answers the encrypted bytes, 400 for an unknown parameter.
Up: ``getuploadurl`` announces an upload (:meth:`FakeCdn.announce`: its key, sizes and MD5, checked by the bot
API); ``POST /c2c/upload?encrypted_query_param=…&filekey=…`` takes the encrypted file, decrypts it, checks it
against the announced size and MD5 and answers the download parameter in ``x-encrypted-param``; a
``sendmessage`` file item then refers to it (:attr:`FakeCdn.uploaded`).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from aiohttp import web


def _cipher(key: bytes) -> Any:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    return Cipher(algorithms.AES(key), modes.ECB())


class FakeCdn:
    """The CDN's files: the users' (kept encrypted), and the bot's uploads (announced, then uploaded)."""

    def __init__(self, base_url: Callable[[], str], requests: list[tuple[str, str]]) -> None:
        #: the server's address (known once it listens), and its log of requests (the CDN's go there too)
        self._base_url, self._requests = base_url, requests
        self._lock = threading.Lock()
        #: files users sent: download param -> encrypted bytes; and how often each was fetched
        self.kept: dict[str, bytes] = {}
        self.fetches: dict[str, int] = {}
        #: uploads announced by getuploadurl (upload param -> details), and the uploaded ones by download param
        self.uploads: dict[str, dict[str, Any]] = {}
        self.uploaded: dict[str, dict[str, Any]] = {}

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/c2c/upload", self._upload)
        router.add_get("/c2c/download", self._download)

    # --- down: what users send --------------------------------------------------------------------
    def put(self, data: bytes) -> tuple[str, bytes]:
        """Keep ``data`` encrypted under a fresh key, as WeChat does with what a user sends; returns (download
        param, key)."""
        from cryptography.hazmat.primitives import padding

        key = secrets.token_bytes(16)
        padder = padding.PKCS7(128).padder()
        encryptor = _cipher(key).encryptor()
        encrypted = encryptor.update(padder.update(data) + padder.finalize()) + encryptor.finalize()
        param = base64.urlsafe_b64encode(secrets.token_bytes(30)).decode()
        with self._lock:
            self.kept[param] = encrypted
        return param, key

    def media_ref(self, data: bytes, *, key_as: str = "raw", full_url: bool = True) -> tuple[dict[str, Any], str]:
        """A CDN media reference to ``data`` as a message carries it, and the hex key for an image item's own
        ``aeskey`` (``key_as`` "item"; "raw": ``aes_key`` is base64 of the key bytes; "hex": base64 of their hex).
        With ``full_url`` the reference names the fake's download address itself."""
        param, key = self.put(data)
        media: dict[str, Any] = {"encrypt_query_param": param, "encrypt_type": 1}
        if key_as == "raw":
            media["aes_key"] = base64.b64encode(key).decode()
        elif key_as == "hex":
            media["aes_key"] = base64.b64encode(key.hex().encode()).decode()
        if full_url:
            media["full_url"] = f"{self._base_url()}/c2c/download?encrypted_query_param={quote(param, safe='')}"
        return media, key.hex() if key_as == "item" else ""

    async def _download(self, request: web.Request) -> web.Response:
        """A file a user sent, encrypted as it was kept; 400 for an unknown download param (as the CDN does)."""
        self._requests.append((request.method, request.path))
        param = request.query.get("encrypted_query_param", "")
        with self._lock:
            data = self.kept.get(param)
            if data is not None:
                self.fetches[param] = self.fetches.get(param, 0) + 1
        if data is None:
            return web.Response(status=400, headers={"x-error-message": "unknown file"})
        return web.Response(body=data, content_type="application/octet-stream")

    # --- up: what the bot sends -------------------------------------------------------------------
    def announce(self, body: dict[str, Any]) -> tuple[str, str]:
        """An upload ``getuploadurl`` accepted (``body``: its filekey, aeskey, sizes, MD5, to_user_id): (upload
        param, the ``upload_full_url`` to post the encrypted file to)."""
        param = base64.urlsafe_b64encode(secrets.token_bytes(24)).decode()
        with self._lock:
            self.uploads[param] = {**body}
        url = (f"{self._base_url()}/c2c/upload?encrypted_query_param={quote(param, safe='')}"
               f"&filekey={body['filekey']}")
        return param, url

    async def _upload(self, request: web.Request) -> web.Response:
        self._requests.append((request.method, request.path))
        with self._lock:
            upload = self.uploads.pop(request.query.get("encrypted_query_param", ""), None)
        if upload is None or request.query.get("filekey") != upload["filekey"]:
            return web.Response(status=400, headers={"x-error-message": "unknown upload"})
        if request.headers.get("Content-Type") != "application/octet-stream":
            return web.Response(status=400, headers={"x-error-message": "not application/octet-stream"})
        body = await request.read()
        if len(body) != upload["filesize"]:
            return web.Response(status=400, headers={"x-error-message": "size mismatch"})
        from cryptography.hazmat.primitives import padding

        try:
            decryptor = _cipher(bytes.fromhex(upload["aeskey"])).decryptor()
            unpadder = padding.PKCS7(128).unpadder()
            data = unpadder.update(decryptor.update(body) + decryptor.finalize()) + unpadder.finalize()
        except ValueError:
            return web.Response(status=400, headers={"x-error-message": "bad padding"})
        if len(data) != upload["rawsize"] or hashlib.md5(data).hexdigest() != upload["rawfilemd5"]:  # noqa: S324
            return web.Response(status=400, headers={"x-error-message": "md5 mismatch"})
        download = base64.urlsafe_b64encode(secrets.token_bytes(30)).decode()
        with self._lock:
            self.uploaded[download] = {**upload, "data": data}
        return web.Response(status=200, headers={"x-encrypted-param": download})
