"""A fake of Feishu / Lark's open platform on 127.0.0.1, for tests: the parts the feishu channel uses.

Built from lark-oapi's sources (the SDK is pointed at it by its own ``domain`` setting) and Feishu's public
docs:

- ``POST /open-apis/auth/v3/tenant_access_token/internal`` (``app_id``, ``app_secret``): a token good for
  7,200 s, or ``{"code": 10014, "msg": "app secret invalid"}`` / ``{"code": 10003, "msg": "invalid param"}``;
- ``POST /callback/ws/endpoint`` (``AppID``, ``AppSecret``): the WebSocket URL with ``device_id`` and
  ``service_id`` in its query, and the ``ClientConfig`` lark-oapi's ``ws.Client`` reads
  (``lark_oapi/ws/client.py`` ``_get_conn_url``);
- the WebSocket itself, protobuf ``pbbp2.Frame``s (``lark_oapi/ws/pb``): the server sends events as DATA
  frames (method 1) with the headers ``type=event``, ``message_id``, ``trace_id``, ``sum=1``, ``seq=0`` and the
  event's JSON (schema 2.0) as payload; the client answers each with the same frame, its payload a JSON
  response (``{"code": 200}``): the ack. An event not acked (no client, the connection lost, an answer other
  than 200) is sent again on the next connection, as Feishu redelivers. Pings (CONTROL frames, method 0,
  ``type=ping``) are answered with a pong;
- the API, every call with ``Authorization: Bearer <tenant token>`` (else HTTP 400 with code 99991663, as
  Feishu answers an invalid token): ``GET /open-apis/bot/v3/info``, ``POST /open-apis/im/v1/messages
  ?receive_id_type=chat_id`` (``text``, ``post`` or ``interactive``; more than 30 KB of body is code 230025),
  ``POST /open-apis/im/v1/messages/{message_id}/reply`` (to a user's message, in its chat; code 230011 when it
  is gone), ``PATCH /open-apis/im/v1/messages/{message_id}`` (interactive only: the card is replaced), ``GET
  /open-apis/im/v1/messages/{message_id}/resources/{file_key}?type=image|file`` (a file a user sent; code 234003
  when it is not in that message), ``POST`` and ``DELETE
  /open-apis/im/v1/messages/{message_id}/reactions[/{reaction_id}]`` (the bot's reactions), ``GET
  /open-apis/im/v1/chats/{chat_id}`` (the group's name) and ``GET /open-apis/contact/v3/users/{open_id}``.

The server runs aiohttp on its own event loop in a background thread::

    with FakeFeishu() as fs:
        fs.push_text("oc_1", "hello", sender="ou_alice")
        fs.wait_texts("oc_1", 1)
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
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from tests.fakes.push_server import PushServer

APP_ID, APP_SECRET = "cli_a1b2c3d4e5f6", "s3cr3t-of-the-app"
BOT_OPEN_ID = "ou_bot0000000000000000000000000001"
INVALID_TOKEN = {"code": 99991663, "msg": "Invalid access token for authorization. Please make a request with "
                 "token attached."}
SECRET_INVALID = {"code": 10014, "msg": "app secret invalid"}
APP_ID_INVALID = {"code": 10003, "msg": "invalid param"}
TOO_LONG = {"code": 230025, "msg": "The message content exceeds the length limit."}
BODY_LIMIT = 30 * 1024


@dataclass
class SentMessage:
    """One message the bot sent, with its card or post as it stands now."""

    message_id: str
    chat_id: str
    msg_type: str
    content: dict[str, Any]
    #: every content it had, the first one first (patches append)
    versions: list[dict[str, Any]] = field(default_factory=list)
    #: the user's message this one replies to ("" when it is none)
    reply_to: str = ""
    at: float = field(default_factory=time.monotonic)

    @property
    def text(self) -> str:
        """What the message shows as text: a card's markdown elements, a post's texts, a text's text."""
        return content_text(self.msg_type, self.content)


def content_text(msg_type: str, content: dict[str, Any]) -> str:
    """The text of a message's content, as a reader sees it."""
    if msg_type == "text":
        return str(content.get("text", ""))
    if msg_type == "interactive":
        elements = content.get("elements") or (content.get("body") or {}).get("elements") or []
        return "\n".join(str(e.get("content", "")) for e in elements if e.get("tag") == "markdown")
    if msg_type == "post":
        post = content.get("zh_cn") or content.get("en_us") or content
        return "\n".join("".join(str(el.get("text", "")) for el in line) for line in post.get("content", []))
    return ""


class FakeFeishu(PushServer):
    """Feishu's open platform with one app and its bot; tests play the users (push events) from any thread."""

    name = "fake Feishu server"

    def __init__(self, *, app_id: str = APP_ID, app_secret: str = APP_SECRET) -> None:
        super().__init__()
        self.app_id, self.app_secret = app_id, app_secret
        self.bot_open_id = BOT_OPEN_ID
        self.bot_name = "LongChat"
        self._ids = itertools.count(1)
        self.tokens: list[str] = []
        #: chat id -> group name; open id -> user name
        self.chats: dict[str, str] = {}
        self.users: dict[str, str] = {}
        self.sent: list[SentMessage] = []
        self.patches: list[tuple[str, float]] = []
        #: reactions on users' messages now: reaction id -> (message id, emoji type); every one ever added
        self.reactions: dict[str, tuple[str, str]] = {}
        self.reacted: list[tuple[str, str]] = []
        #: files users sent: (message id, file key) -> (type, bytes)
        self.resources: dict[tuple[str, str], tuple[str, bytes]] = {}

    # --- lifecycle (tests/fakes/push_server.py) --------------------------------------------------
    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._token)
        app.router.add_post("/callback/ws/endpoint", self._endpoint)
        app.router.add_get("/ws", self._websocket)
        app.router.add_get("/open-apis/bot/v3/info", self._api(self._bot_info))
        app.router.add_post("/open-apis/im/v1/messages", self._api(self._create))
        app.router.add_patch("/open-apis/im/v1/messages/{message_id}", self._api(self._patch))
        app.router.add_post("/open-apis/im/v1/messages/{message_id}/reply", self._api(self._reply))
        app.router.add_get("/open-apis/im/v1/chats/{chat_id}", self._api(self._chat))
        app.router.add_post("/open-apis/im/v1/messages/{message_id}/reactions", self._api(self._react))
        app.router.add_delete("/open-apis/im/v1/messages/{message_id}/reactions/{reaction_id}",
                              self._api(self._unreact))
        app.router.add_get("/open-apis/im/v1/messages/{message_id}/resources/{file_key}", self._api(self._resource))
        app.router.add_get("/open-apis/contact/v3/users/{user_id}", self._api(self._user))

    # --- the users' side (tests) ------------------------------------------------------------------
    def push_text(self, chat_id: str, text: str, *, sender: str = "ou_alice", group: bool = False,
                  mention_bot: bool = False, mentions: dict[str, str] | None = None) -> str:
        """A user writes ``text`` in a chat (a private chat, or with ``group`` a group); ``mention_bot`` puts
        ``@_user_1`` (the bot) in front, as Feishu writes an @-mention; ``mentions`` adds others by open id ->
        name. Returns the Feishu message id."""
        found: list[dict[str, Any]] = []
        if mention_bot:
            text = "@_user_1 " + text
            found.append({"key": "@_user_1", "id": {"open_id": self.bot_open_id, "union_id": "on_bot",
                                                    "user_id": ""}, "name": self.bot_name, "tenant_key": "t1"})
        for n, (open_id, name) in enumerate((mentions or {}).items(), start=len(found) + 1):
            found.append({"key": f"@_user_{n}", "id": {"open_id": open_id, "union_id": "", "user_id": ""},
                          "name": name, "tenant_key": "t1"})
            text += f" @_user_{n}"
        return self.push_message(chat_id, "text", {"text": text}, sender=sender, group=group, mentions=found)

    def push_message(self, chat_id: str, message_type: str, content: dict[str, Any], *, sender: str = "ou_alice",
                     group: bool = False, mentions: list[dict[str, Any]] | None = None) -> str:
        """A user sends a message of any type (``content`` as Feishu puts it in the event)."""
        n = next(self._ids)
        message_id = f"om_{n:032x}"
        now = str(int(time.time() * 1000))
        event = {
            "schema": "2.0",
            "header": {"event_id": secrets.token_hex(16), "event_type": "im.message.receive_v1", "create_time": now,
                       "token": "", "app_id": self.app_id, "tenant_key": "t1"},
            "event": {
                "sender": {"sender_id": {"open_id": sender, "union_id": "on_" + sender, "user_id": ""},
                           "sender_type": "user", "tenant_key": "t1"},
                "message": {"message_id": message_id, "root_id": "", "parent_id": "", "create_time": now,
                            "update_time": now, "chat_id": chat_id, "chat_type": "group" if group else "p2p",
                            "message_type": message_type, "content": json.dumps(content, ensure_ascii=False),
                            "mentions": mentions or []},
            },
        }
        self._queue(message_id, secrets.token_hex(8), json.dumps(event, ensure_ascii=False).encode())
        return message_id

    def push_image(self, chat_id: str, data: bytes, **kwargs: Any) -> str:
        """A user sends a photo (kept for ``GET …/resources/{image_key}?type=image``)."""
        key = "img_v3_" + secrets.token_hex(8)
        message_id = self.push_message(chat_id, "image", {"image_key": key}, **kwargs)
        self.resources[(message_id, key)] = ("image", data)
        return message_id

    def push_audio(self, chat_id: str, data: bytes, **kwargs: Any) -> str:
        """A user sends a voice message (``?type=file`` fetches it)."""
        key = "file_v3_" + secrets.token_hex(8)
        message_id = self.push_message(chat_id, "audio", {"file_key": key, "duration": 2000}, **kwargs)
        self.resources[(message_id, key)] = ("file", data)
        return message_id

    def messages_in(self, chat_id: str) -> list[SentMessage]:
        """The bot's messages in a chat, in order."""
        with self._lock:
            return [m for m in self.sent if m.chat_id == chat_id]

    def texts(self, chat_id: str) -> list[str]:
        """What the bot's messages in a chat show now, in order."""
        return [m.text for m in self.messages_in(chat_id)]

    def wait_texts(self, chat_id: str, n: int, timeout: float = 20.0) -> list[str]:
        """Wait until the bot has sent ``n`` messages to the chat; return what they show."""
        self.wait(lambda: len(self.messages_in(chat_id)) >= n, timeout, f"{n} messages in {chat_id}")
        return self.texts(chat_id)

    # --- the HTTP side ----------------------------------------------------------------------------
    async def _token(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        body = await request.json()
        if body.get("app_id") != self.app_id:
            return web.json_response(APP_ID_INVALID)
        if body.get("app_secret") != self.app_secret:
            return web.json_response(SECRET_INVALID)
        token = "t-" + secrets.token_hex(20)
        self.tokens.append(token)
        return web.json_response({"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200})

    async def _endpoint(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        body = await request.json()
        if body.get("AppID") != self.app_id or body.get("AppSecret") != self.app_secret:
            return web.json_response({"code": 1000040343, "msg": "app id or secret invalid", "data": {}})
        url = f"ws://127.0.0.1:{self.port}/ws?device_id={secrets.token_hex(6)}&service_id=1"
        return web.json_response({"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": {
            "ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 0, "PingInterval": 120}}})

    def _api(self, handler: Any) -> Any:
        async def call(request: web.Request) -> web.Response:
            self.requests.append((request.method, request.path))
            auth = request.headers.get("Authorization", "")
            if not auth.startswith("Bearer ") or auth.removeprefix("Bearer ") not in self.tokens:
                return web.json_response(INVALID_TOKEN, status=400)
            return await handler(request)
        return call

    async def _bot_info(self, request: web.Request) -> web.Response:
        return web.json_response({"code": 0, "msg": "ok", "bot": {
            "activate_status": 2, "app_name": self.bot_name, "avatar_url": "", "ip_white_list": [],
            "open_id": self.bot_open_id}})

    async def _create(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if len(raw) > BODY_LIMIT:
            return web.json_response(TOO_LONG, status=400)
        body = json.loads(raw)
        if request.query.get("receive_id_type") != "chat_id":
            return web.json_response({"code": 99992402, "msg": "field validation failed"}, status=400)
        msg_type = body.get("msg_type")
        if msg_type not in ("text", "post", "interactive"):
            return web.json_response({"code": 230001, "msg": "invalid message content"}, status=400)
        content = json.loads(body["content"])
        message_id = f"om_bot{next(self._ids):026x}"
        with self._lock:
            self.sent.append(SentMessage(message_id, str(body.get("receive_id")), msg_type, content, [content]))
        return web.json_response({"code": 0, "msg": "success", "data": {
            "message_id": message_id, "chat_id": body.get("receive_id"), "msg_type": msg_type}})

    async def _reply(self, request: web.Request) -> web.Response:
        """A reply to a user's message: sent to its chat, in reply to it."""
        raw = await request.read()
        if len(raw) > BODY_LIMIT:
            return web.json_response(TOO_LONG, status=400)
        body = json.loads(raw)
        parent = request.match_info["message_id"]
        payload = self._payloads.get(self.frames_of.get(parent, ""))
        if payload is None:
            return web.json_response({"code": 230011, "msg": "The message was withdrawn."}, status=400)
        chat_id = json.loads(payload)["event"]["message"]["chat_id"]
        msg_type = body.get("msg_type")
        content = json.loads(body["content"])
        message_id = f"om_bot{next(self._ids):026x}"
        with self._lock:
            self.sent.append(SentMessage(message_id, chat_id, msg_type, content, [content], reply_to=parent))
        return web.json_response({"code": 0, "msg": "success", "data": {
            "message_id": message_id, "chat_id": chat_id, "msg_type": msg_type, "parent_id": parent}})

    async def _patch(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if len(raw) > BODY_LIMIT:
            return web.json_response(TOO_LONG, status=400)
        content = json.loads(json.loads(raw)["content"])
        message_id = request.match_info["message_id"]
        with self._lock:
            found = next((m for m in self.sent if m.message_id == message_id), None)
            if found is None:
                return web.json_response({"code": 230011, "msg": "The message was withdrawn."}, status=400)
            if found.msg_type != "interactive":
                return web.json_response({"code": 230001, "msg": "only cards can be updated"}, status=400)
            found.content = content
            found.versions.append(content)
            self.patches.append((message_id, time.monotonic()))
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _react(self, request: web.Request) -> web.Response:
        message_id = request.match_info["message_id"]
        emoji = ((await request.json()).get("reaction_type") or {}).get("emoji_type")
        if message_id not in self.frames_of or not emoji:
            return web.json_response({"code": 231001, "msg": "reaction type is invalid."}, status=400)
        reaction_id = "r_" + secrets.token_hex(8)
        with self._lock:
            self.reactions[reaction_id] = (message_id, emoji)
            self.reacted.append((message_id, emoji))
        return web.json_response({"code": 0, "msg": "success", "data": {
            "reaction_id": reaction_id, "reaction_type": {"emoji_type": emoji}}})

    async def _unreact(self, request: web.Request) -> web.Response:
        with self._lock:
            found = self.reactions.pop(request.match_info["reaction_id"], None)
        if found is None or found[0] != request.match_info["message_id"]:
            return web.json_response({"code": 231003, "msg": "The reaction is not found."}, status=400)
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _resource(self, request: web.Request) -> web.StreamResponse:
        found = self.resources.get((request.match_info["message_id"], request.match_info["file_key"]))
        if found is None or request.query.get("type") != found[0]:
            return web.json_response({"code": 234003, "msg": "File not in msg."}, status=400)
        return web.Response(body=found[1], content_type="application/octet-stream",
                            headers={"Content-Disposition": 'attachment; filename="file"'})

    async def _chat(self, request: web.Request) -> web.Response:
        chat_id = request.match_info["chat_id"]
        name = self.chats.get(chat_id)
        if name is None:
            return web.json_response({"code": 232011, "msg": "the operator has NO permission to get chat"},
                                     status=400)
        return web.json_response({"code": 0, "msg": "success", "data": {"name": name, "chat_mode": "group"}})

    async def _user(self, request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        name = self.users.get(user_id)
        if name is None:
            return web.json_response({"code": 41050, "msg": "no user authority error"}, status=400)
        return web.json_response({"code": 0, "msg": "success", "data": {"user": {"open_id": user_id,
                                                                                 "name": name}}})

    # --- the WebSocket ----------------------------------------------------------------------------
    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await self._connected(ws)
        sender = asyncio.create_task(self._push(ws, lambda frame_id, payload: self._send_event(ws, frame_id, payload)))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.BINARY:
                    continue
                frame = Frame()
                frame.ParseFromString(msg.data)
                headers = {h.key: h.value for h in frame.headers}
                if frame.method == 0 and headers.get("type") == "ping":
                    pong = Frame(SeqID=0, LogID=0, service=frame.service, method=0)
                    header = pong.headers.add()
                    header.key, header.value = "type", "pong"
                    await ws.send_bytes(pong.SerializeToString())
                elif frame.method == 1:
                    self._acked(headers.get("message_id", ""), json.loads(frame.payload or b"{}").get("code"))
        finally:
            sender.cancel()
            self._disconnected(ws)
        return ws

    async def _send_event(self, ws: web.WebSocketResponse, frame_id: str, payload: bytes) -> None:
        """An event as a DATA frame."""
        frame = Frame(SeqID=next(self._ids), LogID=0, service=1, method=1, payload=payload)
        for key, value in (("type", "event"), ("message_id", frame_id), ("trace_id", secrets.token_hex(8)),
                           ("sum", "1"), ("seq", "0")):
            header = frame.headers.add()
            header.key, header.value = key, value
        await ws.send_bytes(frame.SerializeToString())
