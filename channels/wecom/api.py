"""WeCom's server API through wechatpy's ``WeChatClient`` (``wechatpy.enterprise``), pointed at ``wecom_base_url``.

wechatpy's client is synchronous (``requests``), so each call runs in a worker thread; a client is made per call
(its ``requests.Session`` is not shared between threads). The access token comes from :class:`TokenCache`
(shared through the database) and is handed to the client with each call; wechatpy's own refresh is off
(``auto_retry=False``, and its ``gettoken`` URL is fixed to qyapi.weixin.qq.com), so a token WeCom rejects is
replaced here, once, across processes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import requests
from wechatpy.enterprise import WeChatClient
from wechatpy.exceptions import WeChatClientException

from channels.wecom.text import split_text
from channels.wecom.tokens import Shared, TokenCache

logger = logging.getLogger(__name__)

#: errcodes of a token that is bad or expired: fetch another and try again, once
TOKEN_ERRORS = frozenset({40014, 42001})
#: the secret is wrong
WRONG_SECRET = 40001
#: the calling server's IP is not on the app's trusted IP list
UNTRUSTED_IP = 60020
#: the corp id is wrong
WRONG_CORP_ID = 40013
#: WeCom's "too many calls" errcodes: wait and retry
BUSY = frozenset({-1, 45009, 45033})
TIMEOUT_S = 15


class WecomError(Exception):
    """The API answered with an errcode (``errcode`` None: the HTTP call itself failed)."""

    def __init__(self, errcode: int | None, errmsg: str) -> None:
        super().__init__(f"errcode {errcode}: {errmsg}" if errcode is not None else errmsg)
        self.errcode = errcode
        self.errmsg = errmsg


def explain(exc: WecomError, corp_id: str) -> str:
    """One line telling the operator what to fix for an error at start."""
    if exc.errcode == WRONG_SECRET:
        return (f"the app secret was refused (errcode 40001): set wecom_secret to the Secret of the "
                f"self-built app in corp {corp_id} (Admin console > Apps > the app)")
    if exc.errcode == UNTRUSTED_IP:
        return ("this server's IP address is not on the app's trusted IP list (errcode 60020): add it "
                f"under the app's 企业可信IP / Trusted IP in the admin console ({exc.errmsg})")
    if exc.errcode == WRONG_CORP_ID:
        return "the corp id was refused (errcode 40013): set wecom_corp_id to the Corp ID of My Company"
    if exc.errcode is None:
        return f"the API at wecom_base_url cannot be reached ({exc.errmsg})"
    return f"the API refused the app's settings ({exc})"


class _Client(WeChatClient):
    """wechatpy's enterprise client at another base URL."""

    def __init__(self, base_url: str, corp_id: str, secret: str, access_token: str | None = None) -> None:
        super().__init__(corp_id, secret, access_token=access_token, timeout=TIMEOUT_S, auto_retry=False)
        self.API_BASE_URL = base_url.rstrip("/") + "/cgi-bin/"


def _call(fn: Any) -> Any:
    try:
        return fn()
    except WeChatClientException as exc:
        if exc.errcode is None:
            status = getattr(exc.response, "status_code", "?")
            raise WecomError(None, f"HTTP {status}") from None
        raise WecomError(int(exc.errcode), str(exc.errmsg)) from None
    except requests.RequestException as exc:
        raise WecomError(None, f"{type(exc).__name__}: {exc}") from None


class WecomAPI:
    """The calls the channel makes: the token, the agent check, sending to a person or a chat, media."""

    def __init__(self, *, base_url: str, corp_id: str, agent_id: str, secret: str, shared: Shared) -> None:
        self.base_url = base_url.rstrip("/")
        self.corp_id = corp_id
        self.agent_id = agent_id
        self.secret = secret
        self.tokens = TokenCache(shared, f"wecom_token:{corp_id}:{agent_id}", self._fetch_token)

    async def _fetch_token(self) -> tuple[str, int]:
        def fetch() -> dict[str, Any]:
            client = _Client(self.base_url, self.corp_id, self.secret)
            return client._fetch_access_token(  # noqa: SLF001 - wechatpy's own gettoken call, at our base URL
                url=self.base_url + "/cgi-bin/gettoken", params={"corpid": self.corp_id, "corpsecret": self.secret})

        result = await asyncio.to_thread(_call, fetch)
        return str(result["access_token"]), int(result.get("expires_in") or 7200)

    async def _with_token(self, fn: Any) -> Any:
        token = await self.tokens.get()
        try:
            return await asyncio.to_thread(_call, lambda: fn(_Client(self.base_url, self.corp_id, self.secret, token)))
        except WecomError as exc:
            if exc.errcode not in TOKEN_ERRORS:
                raise
            logger.info("wecom: the access token was refused (errcode %s); fetching another", exc.errcode)
        token = await self.tokens.get(rejected=token)
        return await asyncio.to_thread(_call, lambda: fn(_Client(self.base_url, self.corp_id, self.secret, token)))

    async def check(self) -> dict[str, Any]:
        """Get a token and read the app (``agent/get``): a wrong secret, corp id or agent id, or an untrusted IP,
        raises :class:`WecomError` here, at start."""
        return await self._with_token(lambda c: c.agent.get(self.agent_id))

    async def send_text(self, *, user_id: str = "", chat_id: str = "", text: str) -> None:
        """Send ``text`` to a person (``message/send``) or an app chat (``appchat/send``), in pieces of at most
        2,048 bytes."""
        for piece in split_text(text):
            if chat_id:
                await self._with_token(lambda c, p=piece: c.appchat.send_text(chat_id, p))
            else:
                await self._with_token(lambda c, p=piece: c.message.send_text(self.agent_id, user_id, p))

    async def media(self, media_id: str) -> bytes:
        """The bytes of a received photo (``media/get``)."""
        response = await self._with_token(lambda c: c.get("media/get", params={"media_id": media_id,
                                                                               "access_token": c.access_token}))
        if isinstance(response, dict):  # an errcode would have raised; JSON here is not a file
            raise WecomError(None, "media/get answered JSON, not a file")
        return response.content
