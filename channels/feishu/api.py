"""The Feishu / Lark open API as the feishu channel uses it, through lark-oapi's client (synchronous calls,
made from worker threads by the channel).

SDK calls used: ``client.request`` for ``GET /open-apis/bot/v3/info`` (the bot's open id; the credential check
at start, which first fetches the tenant token from ``/open-apis/auth/v3/tenant_access_token/internal``),
``client.im.v1.message.create`` (``POST /open-apis/im/v1/messages``) and ``reply`` (in groups, the answer's first
card replies to the question), ``client.im.v1.message.patch`` (``PATCH
/open-apis/im/v1/messages/{id}``, a card updated in place), ``client.im.v1.message_reaction.create`` and
``delete`` (the "Typing" reaction on the message being answered), ``client.im.v1.message_resource.get`` (a photo
or voice message a user sent), ``client.im.v1.chat.get`` (a group's name) and ``client.contact.v3.user.get`` (a
member's name).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import lark_oapi as lark
from lark_oapi.api.contact.v3 import GetUserRequest
from lark_oapi.api.im.v1 import (
    CreateMessageReactionRequest,
    CreateMessageReactionRequestBody,
    CreateMessageRequest,
    CreateMessageRequestBody,
    DeleteMessageReactionRequest,
    Emoji,
    GetChatRequest,
    GetMessageResourceRequest,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.const import FEISHU_DOMAIN, LARK_DOMAIN
from lark_oapi.core.exception import ObtainAccessTokenException
from lark_oapi.core.token.manager import TokenManager

from core.errors import BotError

#: characters per card: well inside Feishu's 30 KB request body even for CJK text (3 bytes a character)
MESSAGE_LIMIT = 4000

#: codes worth another try: the token expired or was revoked (a new one is fetched), or a rate limit
#: (lark_oapi/channel/errors.py buckets Feishu's codes the same way)
RETRYABLE_CODES = frozenset({99991663, 99991664, 99991665, 99991666, 99991668, 99991402, 11020, 11021, 230020})
#: Feishu's answers to a tenant token it no longer takes (the SDK would keep using its cached one until it expires)
TOKEN_INVALID = frozenset({99991663, 99991664, 99991665, 99991666, 99991668})
#: Feishu's answers when the message to reply to was withdrawn or deleted
MESSAGE_GONE = frozenset({230011, 231003, 230002})
#: the tenant-token endpoint's answers to bad credentials
SECRET_INVALID, APP_ID_INVALID = 10014, 10003
#: Feishu's answer when the app lacks a permission scope (its message names the scope)
SCOPE_MISSING = frozenset({99991672, 99991679})


class FeishuError(BotError):
    """Feishu answered an API call with a non-zero code."""

    def __init__(self, code: int, msg: str, what: str = "") -> None:
        super().__init__(f"{what or 'Feishu'} failed: code {code}: {msg}")
        self.code, self.msg = code, msg


def domain_url(domain: str) -> str:
    """``feishu_domain`` as lark-oapi's ``domain``: ``feishu``, ``lark``, or a base URL as it is."""
    value = (domain or "feishu").strip()
    if value.lower() == "feishu":
        return FEISHU_DOMAIN
    if value.lower() == "lark":
        return LARK_DOMAIN
    return value.rstrip("/")


def card(markdown: str) -> str:
    """A message card (JSON, schema 1.0) showing ``markdown``; ``update_multi`` so it can be patched."""
    return json.dumps({"config": {"wide_screen_mode": True, "update_multi": True},
                       "elements": [{"tag": "markdown", "content": markdown}]}, ensure_ascii=False)


def credential_problem(exc: BaseException) -> str | None:
    """What to fix, in one line, when the credential check failed for a reason the operator must fix."""
    if isinstance(exc, ObtainAccessTokenException):
        if exc.code == SECRET_INVALID:
            return f"feishu_app_secret was rejected ({exc.msg}): copy the App Secret from the developer console"
        if exc.code == APP_ID_INVALID:
            return f"feishu_app_id was rejected ({exc.msg}): copy the App ID (cli_…) from the developer console"
        return f"Feishu refused the app's credentials (code {exc.code}: {exc.msg})"
    if isinstance(exc, FeishuError):
        if exc.code in SCOPE_MISSING:
            return f"the app lacks a permission scope ({exc.msg}); add it under Permissions & Scopes and publish"
        if exc.code in RETRYABLE_CODES:
            return None
        return (f"Feishu refused the bot's info (code {exc.code}: {exc.msg}); enable the Bot capability and "
                "publish a version of the app")
    return None


class FeishuAPI:
    """The calls the channel makes, each one blocking (run them in a thread)."""

    def __init__(self, app_id: str, app_secret: str, domain: str) -> None:
        self.app_id = app_id
        self.client = (lark.Client.builder().app_id(app_id).app_secret(app_secret).domain(domain_url(domain))
                       .log_level(lark.LogLevel.WARNING).timeout(20).build())

    def _fresh_token_on_refusal(self, call: Any) -> Any:
        """``call()``; when Feishu refuses the tenant token, once more with a new one."""
        try:
            return call()
        except FeishuError as exc:
            if exc.code not in TOKEN_INVALID:
                raise
        self.forget_token()
        return call()

    def forget_token(self) -> None:
        """Drop the SDK's cached tenant token (kept per app id for the process): the next call fetches one."""
        TokenManager.cache.set(f"self_tenant_token:{self.app_id}", "", 0)  # the SDK's cache key for it

    def bot_info(self) -> dict[str, Any]:
        """The bot's info (``open_id``, ``app_name``), with a new token: raises when the credentials or the app
        are not right."""
        self.forget_token()
        return self._fresh_token_on_refusal(self._bot_info)

    def _bot_info(self) -> dict[str, Any]:
        request = (lark.BaseRequest.builder().http_method(lark.HttpMethod.GET).uri("/open-apis/bot/v3/info")
                   .token_types({lark.AccessTokenType.TENANT}).build())
        response = self.client.request(request)
        raw = response.raw
        body = json.loads(raw.content) if raw is not None and raw.content else {}
        if body.get("code", response.code) != 0:
            raise FeishuError(int(body.get("code", response.code or -1)), str(body.get("msg", response.msg)),
                              "bot/v3/info")
        bot = body.get("bot")
        if not isinstance(bot, dict) or not bot.get("open_id"):
            raise FeishuError(-1, "no bot in the answer: is the Bot capability enabled?", "bot/v3/info")
        return bot

    def send_card(self, chat_id: str, markdown: str, reply_to: str = "") -> str:
        """Send one card to a chat (with ``reply_to``, as a reply to that message); its message id. A reply to a
        message that is gone is sent as a plain message."""
        if reply_to:
            try:
                return self._fresh_token_on_refusal(lambda: self._reply_card(reply_to, markdown))
            except FeishuError as exc:
                if exc.code not in MESSAGE_GONE:
                    raise
        return self._fresh_token_on_refusal(lambda: self._send_card(chat_id, markdown))

    def _reply_card(self, message_id: str, markdown: str) -> str:
        body = (ReplyMessageRequestBody.builder().msg_type("interactive").content(card(markdown))
                .uuid(str(uuid.uuid4())).build())
        request = ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
        response = self.client.im.v1.message.reply(request)
        if not response.success():
            raise FeishuError(response.code, response.msg, "replying to a message")
        return str(response.data.message_id)

    def _send_card(self, chat_id: str, markdown: str) -> str:
        body = (CreateMessageRequestBody.builder().receive_id(chat_id).msg_type("interactive")
                .content(card(markdown)).uuid(str(uuid.uuid4())).build())
        request = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
        response = self.client.im.v1.message.create(request)
        if not response.success():
            raise FeishuError(response.code, response.msg, "sending a message")
        return str(response.data.message_id)

    def patch_card(self, message_id: str, markdown: str) -> None:
        """Replace a sent card's text."""
        self._fresh_token_on_refusal(lambda: self._patch_card(message_id, markdown))

    def _patch_card(self, message_id: str, markdown: str) -> None:
        body = PatchMessageRequestBody.builder().content(card(markdown)).build()
        request = PatchMessageRequest.builder().message_id(message_id).request_body(body).build()
        response = self.client.im.v1.message.patch(request)
        if not response.success():
            raise FeishuError(response.code, response.msg, "updating a message")

    def add_reaction(self, message_id: str, emoji: str) -> str:
        """Put a reaction on a user's message; its reaction id."""
        reaction = Emoji.builder().emoji_type(emoji).build()
        body = CreateMessageReactionRequestBody.builder().reaction_type(reaction).build()
        request = CreateMessageReactionRequest.builder().message_id(message_id).request_body(body).build()
        response = self.client.im.v1.message_reaction.create(request)
        if not response.success() or response.data is None:
            raise FeishuError(response.code, response.msg, "adding a reaction")
        return str(response.data.reaction_id or "")

    def remove_reaction(self, message_id: str, reaction_id: str) -> None:
        """Take a reaction off again."""
        request = DeleteMessageReactionRequest.builder().message_id(message_id).reaction_id(reaction_id).build()
        response = self.client.im.v1.message_reaction.delete(request)
        if not response.success():
            raise FeishuError(response.code, response.msg, "removing a reaction")

    def resource(self, message_id: str, file_key: str, kind: str) -> bytes:
        """A photo (``kind`` "image") or an audio file ("file") a user sent in message ``message_id``."""
        return self._fresh_token_on_refusal(lambda: self._resource(message_id, file_key, kind))

    def _resource(self, message_id: str, file_key: str, kind: str) -> bytes:
        request = GetMessageResourceRequest.builder().message_id(message_id).file_key(file_key).type(kind).build()
        response = self.client.im.v1.message_resource.get(request)
        if not response.success() or response.file is None:
            raise FeishuError(response.code or -1, response.msg or "no file", "fetching a file")
        return response.file.read()

    def chat_name(self, chat_id: str) -> str:
        """A group's name ("" when it cannot be read)."""
        response = self.client.im.v1.chat.get(GetChatRequest.builder().chat_id(chat_id).build())
        if not response.success() or response.data is None:
            return ""
        return str(response.data.name or "")

    def user_name(self, open_id: str) -> str:
        """A member's name ("" without the contact permission)."""
        request = GetUserRequest.builder().user_id(open_id).user_id_type("open_id").build()
        response = self.client.contact.v3.user.get(request)
        if not response.success() or response.data is None or response.data.user is None:
            return ""
        return str(response.data.user.name or "")
