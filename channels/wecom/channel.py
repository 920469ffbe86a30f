"""The wecom channel: a WeCom (企业微信) self-built application (DESIGN §5, issue 45).

WeCom posts each message to the app's callback URL (``/wecom/callback`` on ``wecom_port``, served by
:mod:`channels.wecom.callback`), encrypted and signed with the app's Token and EncodingAESKey; wechatpy checks
and decrypts it. The callback is answered as soon as the message is journalled, and the reply goes out later
through the send API (``message/send`` to a person, ``appchat/send`` to a chat), in pieces of at most 2,048
bytes. WeCom cannot edit a sent message, so answers go out whole.

Session ids: ``wecom:<user id>`` in private; a message that carries a ``ChatId`` (a group chat) follows the
group rules of DESIGN §1.3 (``wecom:group:<chat id>[:<user id>]``) and is answered in that chat.

Any process can send (``answered_anywhere``): the access token is shared through the database
(:mod:`channels.wecom.tokens`), so several processes behind one callback URL fetch it once.
"""

from __future__ import annotations

import base64
import binascii
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from wechatpy.enterprise.crypto import WeChatCrypto

from channels.base import BaseChannel
from channels.registry import register_channel
from channels.wecom.api import BUSY, WecomAPI, WecomError, explain
from channels.wecom.callback import PATH, CallbackServer
from channels.wecom.tokens import MemoryShared, Shared
from core.errors import BotError
from core.messages import IncomingMessage

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

#: what a WeCom MsgType is called in ``IncomingMessage.content_type`` (text, image and voice are read; the rest
#: get a note)
CONTENT_TYPES = {"image": "photo", "voice": "voice", "video": "video", "file": "document",
                 "location": "location", "link": "link"}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


@register_channel("wecom")
class WecomChannel(BaseChannel):
    """A WeCom self-built app (see the module docstring)."""

    name = "wecom"
    answered_anywhere = True
    fetches_media = True
    #: the address the callback server listens on (a reverse proxy or WeCom's servers reach it there)
    listen = "0.0.0.0"  # noqa: S104 - WeCom's servers must reach the callback

    def __init__(self, config: Config, shared_values: Shared | None = None) -> None:
        super().__init__()
        self.config = config
        self.api = WecomAPI(base_url=config.wecom_base_url, corp_id=config.wecom_corp_id,
                            agent_id=config.wecom_agent_id, secret=config.wecom_secret,
                            shared=shared_values if shared_values is not None else MemoryShared())
        self.server: CallbackServer | None = None

    @classmethod
    def preflight(cls, cfg: Config) -> str | None:
        missing = [k for k in ("wecom_corp_id", "wecom_agent_id", "wecom_secret") if not getattr(cfg, k)]
        if missing:
            return (f"set {', '.join(missing)} (the Corp ID of My Company, and the AgentId and Secret of "
                    "the self-built app)")
        callback = [k for k in ("wecom_token", "wecom_aes_key") if not getattr(cfg, k)]
        if callback:
            return (f"the callback is not configured: set {' and '.join(callback)} (the Token and "
                    f"EncodingAESKey of the app's Receive messages settings, whose URL is "
                    f"http://<this server>:{cfg.wecom_port}{PATH})")
        if not _aes_key_ok(cfg.wecom_aes_key):
            return "wecom_aes_key is not an EncodingAESKey (43 letters and digits, as WeCom shows it)"
        return None

    async def start(self, intake: bool = True) -> None:
        cfg = self.config
        try:
            await self.api.check()
        except WecomError as exc:
            if exc.errcode is not None:
                raise BotError(explain(exc, cfg.wecom_corp_id)) from None
            logger.warning("wecom: %s; messages are still taken, and replies are retried",
                           explain(exc, cfg.wecom_corp_id))
        crypto = WeChatCrypto(cfg.wecom_token, cfg.wecom_aes_key, cfg.wecom_corp_id)
        self.server = CallbackServer(self, crypto=crypto, listen=self.listen, port=cfg.wecom_port)
        try:
            await self.server.start()
        except OSError as exc:
            self.server = None
            raise BotError(f"cannot listen on port {cfg.wecom_port} for the callback ({exc.strerror or exc}); "
                           "set wecom_port to a free port") from None
        logger.info("wecom: callbacks at http://%s:%d%s", self.listen, self.server.bound_port, PATH)

    async def stop(self) -> None:
        if self.server is not None:
            server, self.server = self.server, None
            await server.stop()

    def to_incoming(self, data: dict[str, Any]) -> IncomingMessage | None:
        """A decrypted callback as an :class:`IncomingMessage`; None for events and what the bot ignores."""
        kind = _text(data.get("MsgType"))
        sender = _text(data.get("FromUserName"))
        if kind in ("", "event") or not sender:
            return None
        chat_id = _text(data.get("ChatId"))
        is_group = bool(chat_id) and _text(data.get("ChatType") or "group") == "group"
        created = data.get("CreateTime")
        when = datetime.fromtimestamp(int(created), UTC) if str(created or "").isdigit() else datetime.now(UTC)
        message_id = _text(data.get("MsgId")) or f"{sender}:{created}"
        extra: dict[str, Any] = {}
        text = _text(data.get("Content")) if kind == "text" else ""
        content_type = "text" if kind == "text" else CONTENT_TYPES.get(kind, "other")
        if kind in ("image", "voice") and data.get("MediaId"):
            extra["media_id"] = _text(data.get("MediaId"))
        if kind == "voice":  # AMR (WeCom's voice format), which transcription models do not take: a short note,
            # unless WeCom transcribed it (``Recognition``, when the app's speech recognition is on)
            extra["audio_format"] = (_text(data.get("Format")) or "amr").lower()
            if data.get("Recognition"):
                extra["transcript"] = _text(data.get("Recognition"))
        return IncomingMessage(channel=self.name, chat_id=chat_id if is_group else sender, user_id=sender,
                               user_name=sender, text=text, is_group=is_group, group_name=chat_id if is_group else "",
                               message_id=message_id, time=when, content_type=content_type, extra=extra)

    async def send(self, to: IncomingMessage, text: str) -> None:
        if to.is_group:
            await self.api.send_text(chat_id=to.chat_id, text=text)
        else:
            await self.api.send_text(user_id=to.user_id, text=text)

    async def download(self, msg: IncomingMessage) -> bytes | None:
        media_id = msg.extra.get("media_id")
        return await self.api.media(media_id) if media_id else None

    def retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        if isinstance(exc, WecomError):
            if exc.errcode is None:
                return 0.0  # the HTTP call failed: the network, a 502
            return 1.0 if exc.errcode in BUSY else None
        return super().retry_delay(exc, attempt)


def _aes_key_ok(key: str) -> bool:
    try:
        return len(key) == 43 and len(base64.b64decode(key + "=")) == 32
    except (binascii.Error, ValueError):
        return False
