"""The WeCom app's callback server: ``/wecom/callback`` on ``wecom_port``, its own aiohttp server (as the Telegram
webhook's), with WeCom's signature and AES encryption checked by wechatpy (``wechatpy.enterprise.crypto``).

- ``GET``: the URL check WeCom makes when the callback is saved in the admin console: the decrypted ``echostr``
  is the answer.
- ``POST``: one encrypted message. It is answered 200 (an empty body: WeCom wants an answer within five
  seconds, and the reply goes out later through the send API) once it is journalled; 500 when the database
  refused it, so WeCom sends it again; 403 when the signature or the encryption is wrong (logged in one line,
  at most once a minute with a count, and nothing journalled); 400 when the body is not WeCom's XML.

WeCom retries a callback it thinks failed, with the same ``MsgId``: the journal's dedup answers it once. Any
number of processes may serve the callback URL behind a load balancer (DESIGN §10).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import xmltodict
from aiohttp import web
from wechatpy.enterprise.crypto import WeChatCrypto
from wechatpy.exceptions import InvalidSignatureException, WeChatException

logger = logging.getLogger(__name__)

PATH = "/wecom/callback"
#: refused requests are logged at most this often (with how many there were since)
REFUSAL_LOG_S = 60.0
SHUTDOWN_GRACE = 5.0
MAX_BODY = 1024 * 1024


class CallbackServer:
    """Serves ``/wecom/callback`` for one :class:`channels.wecom.channel.WecomChannel`."""

    def __init__(self, channel: Any, *, crypto: WeChatCrypto, listen: str, port: int) -> None:
        self.channel = channel
        self.crypto = crypto
        self.listen = listen
        self.port = port
        self._runner: web.AppRunner | None = None
        self._refused = 0
        self._refused_logged = 0.0
        #: the port really bound (``port`` 0 in tests)
        self.bound_port: int | None = None

    async def start(self) -> None:
        """Listen; raises ``OSError`` when the address cannot be bound."""
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_get(PATH, self.on_verify)
        app.router.add_post(PATH, self.on_post)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE)
        await runner.setup()
        site = web.TCPSite(runner, self.listen, self.port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        sockets = getattr(site._server, "sockets", None) or []  # noqa: SLF001 - the port really bound
        self.bound_port = sockets[0].getsockname()[1] if sockets else self.port

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def _refuse(self, request: web.Request, why: str) -> web.Response:
        """403, logged in one line (at most once a minute, with the count)."""
        self._refused += 1
        now = time.monotonic()
        if now - self._refused_logged >= REFUSAL_LOG_S:
            more = f" ({self._refused} refused since the last such line)" if self._refused > 1 else ""
            logger.warning("wecom: a callback from %s was refused: %s; check wecom_token, wecom_aes_key and "
                           "wecom_corp_id against the app's Receive messages settings%s", request.remote, why, more)
            self._refused_logged = now
            self._refused = 0
        return web.Response(status=403, text="forbidden")

    def _query(self, request: web.Request) -> tuple[str, str, str]:
        q = request.query
        return q.get("msg_signature", ""), q.get("timestamp", ""), q.get("nonce", "")

    async def on_verify(self, request: web.Request) -> web.Response:
        """WeCom's check of the callback URL: answer the decrypted ``echostr``."""
        signature, timestamp, nonce = self._query(request)
        echo = request.query.get("echostr", "")
        try:
            plain = self.crypto.check_signature(signature, timestamp, nonce, echo)
        except InvalidSignatureException:
            return self._refuse(request, "wrong signature on the URL check")
        except (WeChatException, ValueError, TypeError) as exc:
            return self._refuse(request, f"the URL check's echostr cannot be decrypted ({type(exc).__name__})")
        logger.info("wecom: the callback URL was verified")
        return web.Response(text=plain if isinstance(plain, str) else plain.decode("utf-8"))

    async def on_post(self, request: web.Request) -> web.Response:
        """One encrypted message from WeCom."""
        signature, timestamp, nonce = self._query(request)
        body = await request.read()
        try:
            outer = xmltodict.parse(body)["xml"]
            if not isinstance(outer, dict) or not outer.get("Encrypt"):
                raise ValueError("no Encrypt element")
        except Exception as exc:  # noqa: BLE001 - whatever a body that is not WeCom's XML raises
            logger.warning("wecom: a callback whose body is not WeCom's XML was refused (%s)", type(exc).__name__)
            return web.Response(status=400, text="bad request")
        try:
            plain = self.crypto.decrypt_message(outer, signature, timestamp, nonce)
        except InvalidSignatureException:
            return self._refuse(request, "wrong signature")
        except (WeChatException, ValueError, TypeError, UnicodeError) as exc:
            return self._refuse(request, f"the message cannot be decrypted ({type(exc).__name__})")
        try:
            data = xmltodict.parse(plain)["xml"]
        except Exception as exc:  # noqa: BLE001
            logger.warning("wecom: a decrypted callback is not XML (%s); skipped", type(exc).__name__)
            return web.Response(text="")
        incoming = self.channel.to_incoming(data)
        if incoming is None:
            return web.Response(text="")  # an event, or a kind of message the bot does not act on
        if not await self.channel.deliver(incoming):
            logger.warning("wecom: message %s could not be journalled; WeCom will send it again",
                           incoming.message_id)
            return web.Response(status=500, text="retry")
        return web.Response(text="")
