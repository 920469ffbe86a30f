"""A fake of DingTalk's open platform on 127.0.0.1, for tests: Stream mode and the robot send APIs.

Built from dingtalk-stream's sources (the SDK is pointed at it by its own ``DINGTALK_OPENAPI_ENDPOINT``
environment variable, read when the SDK is imported) and DingTalk's public docs:

- ``POST /v1.0/gateway/connections/open`` (``clientId``, ``clientSecret``, ``subscriptions``): the ``endpoint``
  and ``ticket`` of a WebSocket (``dingtalk_stream/stream.py`` ``open_connection``), or HTTP 401
  ``{"code": "authFailed", "message": "鉴权失败"}`` for bad credentials (DingTalk's answer, as users report it);
- the WebSocket, JSON frames: the server sends a bot message as ``{"specVersion": "1.0", "type": "CALLBACK",
  "headers": {"topic": "/v1.0/im/bot/messages/get", "messageId": …, …}, "data": "<the message as JSON>"}``; the
  client answers ``{"code": 200, "headers": {"messageId": …}, "message": "OK", "data": …}`` (the ack). A message
  not acked with 200 is sent again on the next connection, as DingTalk redelivers;
- ``POST /v1.0/oauth2/accessToken`` (``appKey``, ``appSecret``): ``{"accessToken", "expireIn": 7200}``, or 401
  as above;
- with ``x-acs-dingtalk-access-token``: ``POST /v1.0/robot/oToMessages/batchSend`` (``robotCode``, ``userIds``,
  ``msgKey``, ``msgParam``) and ``POST /v1.0/robot/groupMessages/send`` (``openConversationId`` instead of
  ``userIds``), ``POST /v1.0/robot/messageFiles/download`` (``downloadCode``, ``robotCode``: a ``downloadUrl``
  the fake serves at ``/files/{code}``); ``msgKey`` ``sampleMarkdown`` (``msgParam`` ``{"title", "text"}``) or
  ``sampleText`` (``{"content"}``); more than :data:`TEXT_LIMIT` characters of text is refused. A wrong token is
  HTTP 401 ``{"code": "InvalidAuthentication", "message": "不合法的access_token"}``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.push_server import PushServer

CLIENT_ID, CLIENT_SECRET = "dingabcdefghijk", "the-client-secret"
AUTH_FAILED = {"code": "authFailed", "message": "鉴权失败"}
BAD_TOKEN = {"code": "InvalidAuthentication", "message": "不合法的access_token"}
TOPIC = "/v1.0/im/bot/messages/get"
TEXT_LIMIT = 5000
BOT_ID = "$:LWCP_v1:$botbotbotbot"


@dataclass
class Sent:
    """One message the bot sent: to a user (``user``) or a group (``conversation``)."""

    conversation: str
    user: str
    msg_key: str
    text: str
    title: str = ""
    at: float = field(default_factory=time.monotonic)


class FakeDingTalk(PushServer):
    """DingTalk with one app and its bot; tests play the users (push messages) from any thread."""

    name = "fake DingTalk server"

    def __init__(self, *, client_id: str = CLIENT_ID, client_secret: str = CLIENT_SECRET) -> None:
        super().__init__()
        self.client_id, self.client_secret = client_id, client_secret
        self._ids = itertools.count(1)
        self.tokens: list[str] = []
        #: the conversation of each private chat's user (staff id -> conversation id)
        self.private_of: dict[str, str] = {}
        self.sent: list[Sent] = []
        #: files users sent, by download code
        self.files: dict[str, bytes] = {}

    @property
    def base_url(self) -> str:
        """What ``DINGTALK_OPENAPI_ENDPOINT`` points at."""
        return f"http://127.0.0.1:{self.port}"

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1.0/gateway/connections/open", self._open)
        app.router.add_get("/connect", self._websocket)
        app.router.add_post("/v1.0/oauth2/accessToken", self._token)
        app.router.add_post("/v1.0/robot/oToMessages/batchSend", self._send_private)
        app.router.add_post("/v1.0/robot/groupMessages/send", self._send_group)
        app.router.add_post("/v1.0/robot/messageFiles/download", self._download_url)
        app.router.add_get("/files/{code}", self._file)

    # --- the users' side --------------------------------------------------------------------------
    def push_text(self, conversation: str, text: str, **kwargs: Any) -> str:
        """A user writes ``text``: in a private chat (``conversation`` is its id), or in the group called
        ``group``, @-mentioning the bot with ``at_bot``. Returns DingTalk's message id."""
        return self.push(conversation, "text", {"text": {"content": text}}, **kwargs)

    def push_picture(self, conversation: str, data: bytes, **kwargs: Any) -> str:
        """A user sends a picture (fetched with its ``downloadCode``)."""
        code = "dc_" + secrets.token_hex(8)
        self.files[code] = data
        return self.push(conversation, "picture", {"content": {"downloadCode": code, "pictureDownloadCode": code}},
                         **kwargs)

    def push_audio(self, conversation: str, recognition: str, data: bytes = b"#!AMR\n", **kwargs: Any) -> str:
        """A user sends a voice message; DingTalk's transcript of it is ``recognition``."""
        code = "dc_" + secrets.token_hex(8)
        self.files[code] = data
        return self.push(conversation, "audio", {"content": {"duration": 2000, "downloadCode": code,
                                                             "recognition": recognition}}, **kwargs)

    def push(self, conversation: str, msgtype: str, fields: dict[str, Any], *, staff_id: str = "alice01",
             nick: str = "Alice", group: str = "", at_bot: bool = False) -> str:
        """A user's message of any type (``fields``: its content as DingTalk puts it in the message)."""
        n = next(self._ids)
        msg_id = f"msg{n:08d}=="
        now = int(time.time() * 1000)
        data: dict[str, Any] = {
            "conversationId": conversation, "chatbotCorpId": "dingcorp", "chatbotUserId": BOT_ID,
            "msgId": msg_id, "senderNick": nick, "isAdmin": False, "senderStaffId": staff_id,
            "sessionWebhookExpiredTime": now + 5400_000, "createAt": now, "senderCorpId": "dingcorp",
            "conversationType": "2" if group else "1", "senderId": f"$:LWCP_v1:${staff_id}",
            "sessionWebhook": f"{self.base_url}/robot/sendBySession?session={secrets.token_hex(8)}",
            "robotCode": self.client_id, "msgtype": msgtype, **fields,
        }
        if group:
            data.update(conversationTitle=group, isInAtList=at_bot,
                        atUsers=[{"dingtalkId": BOT_ID}] if at_bot else [])
        else:
            self.private_of[staff_id] = conversation
        frame_id = secrets.token_hex(8)
        frame = {"specVersion": "1.0", "type": "CALLBACK", "headers": {
            "appId": "app1", "connectionId": "conn1", "contentType": "application/json", "messageId": frame_id,
            "time": str(now), "topic": TOPIC}, "data": json.dumps(data, ensure_ascii=False)}
        self._queue(msg_id, frame_id, json.dumps(frame, ensure_ascii=False))
        return msg_id

    def texts(self, conversation: str) -> list[str]:
        """What the bot sent to a conversation (a private one by its user's conversation), in order."""
        with self._lock:
            return [s.text for s in self.sent if s.conversation == conversation
                    or (s.user and self.private_of.get(s.user) == conversation)]

    def wait_texts(self, conversation: str, n: int, timeout: float = 20.0) -> list[str]:
        self.wait(lambda: len(self.texts(conversation)) >= n, timeout, f"{n} messages in {conversation}")
        return self.texts(conversation)

    # --- HTTP ---------------------------------------------------------------------------------------
    def _good(self, body: dict[str, Any], id_key: str, secret_key: str) -> bool:
        return body.get(id_key) == self.client_id and body.get(secret_key) == self.client_secret

    async def _open(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        body = await request.json()
        if not self._good(body, "clientId", "clientSecret"):
            return web.json_response({"requestid": secrets.token_hex(8), **AUTH_FAILED}, status=401)
        if not any(s.get("topic") == TOPIC for s in body.get("subscriptions", [])):
            return web.json_response({"code": "invalidParameter", "message": "no subscription"}, status=400)
        return web.json_response({"endpoint": f"ws://127.0.0.1:{self.port}/connect",
                                  "ticket": secrets.token_hex(16)})

    async def _token(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        body = await request.json()
        if not self._good(body, "appKey", "appSecret"):
            return web.json_response({"requestid": secrets.token_hex(8), **AUTH_FAILED}, status=401)
        token = secrets.token_hex(16)
        self.tokens.append(token)
        return web.json_response({"accessToken": token, "expireIn": 7200})

    async def _sent(self, request: web.Request, conversation: str, user: str, body: dict[str, Any]
                    ) -> web.Response:
        if request.headers.get("x-acs-dingtalk-access-token") not in self.tokens:
            return web.json_response(BAD_TOKEN, status=401)
        if body.get("robotCode") != self.client_id:
            return web.json_response({"code": "resource.not.found", "message": "robot 不存在"}, status=400)
        key = body.get("msgKey")
        param = json.loads(body.get("msgParam") or "{}")
        text = param.get("text") if key == "sampleMarkdown" else param.get("content") if key == "sampleText" else None
        if not isinstance(text, str):
            return web.json_response({"code": "invalidParameter.msgParam", "message": "msgParam 不合法"}, status=400)
        if len(text) > TEXT_LIMIT:
            return web.json_response({"code": "invalidParameter.msgParam.length", "message": "消息内容过长"},
                                     status=400)
        with self._lock:
            self.sent.append(Sent(conversation, user, key, text, str(param.get("title", ""))))
        return web.json_response({"processQueryKey": secrets.token_hex(8), "invalidStaffIdList": [],
                                  "flowControlledStaffIdList": []})

    async def _download_url(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        if request.headers.get("x-acs-dingtalk-access-token") not in self.tokens:
            return web.json_response(BAD_TOKEN, status=401)
        code = (await request.json()).get("downloadCode", "")
        if code not in self.files:
            return web.json_response({"code": "invalidParameter.downloadCode", "message": "downloadCode 不合法"},
                                     status=400)
        return web.json_response({"downloadUrl": f"{self.base_url}/files/{code}"})

    async def _file(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["code"])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    async def _send_private(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        body = await request.json()
        users = body.get("userIds") or []
        if len(users) != 1:
            return web.json_response({"code": "invalidParameter.userIds", "message": "userIds 不合法"}, status=400)
        return await self._sent(request, "", users[0], body)

    async def _send_group(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        body = await request.json()
        return await self._sent(request, str(body.get("openConversationId") or ""), "", body)

    # --- the WebSocket ------------------------------------------------------------------------------
    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await self._connected(ws)
        sender = asyncio.create_task(self._push(ws, lambda _, payload: ws.send_str(payload)))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                ack = json.loads(msg.data)
                self._acked((ack.get("headers") or {}).get("messageId", ""), ack.get("code"))
        finally:
            sender.cancel()
            self._disconnected(ws)
        return ws
