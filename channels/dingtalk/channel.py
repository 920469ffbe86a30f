"""The dingtalk channel: DingTalk bots over dingtalk-stream's Stream mode (no public address).

Receiving: dingtalk-stream's ``DingTalkStreamClient`` (``POST /v1.0/gateway/connections/open``, then JSON frames
over a WebSocket) makes blocking HTTP calls inside its own loop, so it runs in a thread of its own with its own
loop, as the wechat channel runs itchat. Each bot message (topic ``/v1.0/im/bot/messages/get``) is turned into an
:class:`IncomingMessage` and handed to the dispatcher on the main loop; the SDK sends its ack after the handler
returns, and the handler returns only once the message is journalled, so nothing is confirmed to DingTalk
before it is journalled (a message not acked is delivered again, and the journal's unique ``(channel,
message_id)`` makes a redelivery a duplicate that is not answered twice). A message the journal refused is
answered 500, so DingTalk delivers it again.

Sending: DingTalk's robot APIs on its OpenAPI endpoint (the SDK's ``DINGTALK_OPENAPI_ENDPOINT``, which the SDK
reads from the environment): an access token from ``/v1.0/oauth2/accessToken``, then
``/v1.0/robot/oToMessages/batchSend`` (private chats, to the sender's staff id) or
``/v1.0/robot/groupMessages/send`` (groups, to the conversation), as ``sampleMarkdown`` messages split at
:data:`MESSAGE_LIMIT` characters. Unlike a message's session webhook these work from any process and at any
time later (reminders, a reply after a restart). DingTalk's AI cards need a card template made in its card
platform, so answers are sent whole, not streamed.

Pictures are fetched through ``/v1.0/robot/messageFiles/download`` (a short-lived URL) and shown to the model;
a voice message is read from DingTalk's own transcript (its ``recognition``), as WeChat's is.

DingTalk gives a bot in a group only the messages that @-mention it, so there is no group background there.

Of several processes on one database, only the elected one holds the Stream connection (``single_receiver``);
any can send (``answered_anywhere``). Rejected credentials are one line at start and the channel stays off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import aiohttp
import dingtalk_stream
from dingtalk_stream import AckMessage, ChatbotHandler, ChatbotMessage
from dingtalk_stream.utils import DINGTALK_OPENAPI_ENDPOINT

from channels.registry import register_channel
from channels.sdk_thread import SdkThread, SdkThreadChannel
from channels.text import split_text
from core.errors import BotError
from core.messages import IncomingMessage

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)
#: the SDK's own records, kept to warnings (its INFO lines carry connection tickets)
sdk_logger = logging.getLogger("channels.dingtalk.sdk")
sdk_logger.setLevel(logging.WARNING)

#: characters per markdown message
MESSAGE_LIMIT = 4000
#: seconds the SDK's handler waits for the journal before it answers 500 (DingTalk then delivers it again)
JOURNAL_TIMEOUT_S = 60.0
JOIN_TIMEOUT_S = 5.0
#: the largest picture read
MAX_MEDIA_BYTES = 20 * 1000 * 1000
SEND_TIMEOUT_S = 20.0
CONTENT_TYPES = {"picture": "photo", "audio": "voice", "video": "video", "file": "document"}


class DingTalkError(BotError):
    """DingTalk refused a call (its HTTP status, code and message)."""

    def __init__(self, status: int, code: str, message: str, what: str) -> None:
        super().__init__(f"{what} failed: HTTP {status} {code}: {message}")
        self.status, self.code = status, code


def to_incoming(message: ChatbotMessage, channel: str = "dingtalk") -> IncomingMessage | None:
    """One bot message as an :class:`IncomingMessage`; None without a conversation."""
    if not message.conversation_id:
        return None
    kind = str(message.message_type or "")
    if kind == "text" and message.text is not None:
        text = str(message.text.content or "").strip()
    elif kind == "richText" and message.rich_text_content is not None:
        text = "".join(str(part.get("text", "")) for part in message.rich_text_content.rich_text_list or []
                       if isinstance(part, dict)).strip()
    else:
        text = ""
    content = message.extensions.get("content")
    content = content if isinstance(content, dict) else {}
    extra: dict[str, Any] = {"staff_id": str(message.sender_staff_id or ""),
                             "robot_code": str(message.robot_code or "")}
    if kind == "picture" and content.get("downloadCode"):
        extra["download_code"] = str(content["downloadCode"])
    elif kind == "audio":  # DingTalk transcribes voice itself: its recognition is what the bot reads
        extra["transcript"] = str(content.get("recognition") or "").strip()
        extra["download_code"] = str(content.get("downloadCode") or "")
        extra["audio_format"] = "amr"
    is_group = str(message.conversation_type) == "2"
    created = int(message.create_at or 0)
    when = datetime.fromtimestamp(created / 1000, UTC) if created > 0 else datetime.now(UTC)
    user = str(message.sender_staff_id or message.sender_id or "")
    return IncomingMessage(
        channel=channel, chat_id=str(message.conversation_id), user_id=user, text=text,
        user_name=str(message.sender_nick or user), is_group=is_group,
        group_name=str(message.conversation_title or "") if is_group else "",
        mentions_bot=bool(message.is_in_at_list) if is_group else False, message_id=str(message.message_id or ""),
        time=when, content_type="text" if kind in ("text", "richText") else CONTENT_TYPES.get(kind, "other"),
        extra=extra)


class _Handler(ChatbotHandler):
    """The SDK's handler of bot messages: hands each to the channel and acks it once it is journalled."""

    def __init__(self, channel: DingTalkChannel) -> None:
        super().__init__()
        self.logger = sdk_logger
        self.channel = channel

    async def process(self, callback: Any) -> tuple[int, str]:
        message = ChatbotMessage.from_dict(callback.data)
        incoming = to_incoming(message, self.channel.name)
        if incoming is None:
            return AckMessage.STATUS_OK, "OK"
        loop = self.channel.event_loop
        if loop is None or loop.is_closed():
            return AckMessage.STATUS_SYSTEM_EXCEPTION, "not running"
        future = asyncio.run_coroutine_threadsafe(self.channel.deliver(incoming), loop)
        try:
            async with asyncio.timeout(JOURNAL_TIMEOUT_S):
                taken = await asyncio.wrap_future(future)
        except Exception as exc:  # noqa: BLE001 - DingTalk delivers it again
            logger.warning("dingtalk: message %s not taken (%s); DingTalk will deliver it again",
                           incoming.message_id, exc)
            return AckMessage.STATUS_SYSTEM_EXCEPTION, "not journalled"
        if not taken:
            return AckMessage.STATUS_SYSTEM_EXCEPTION, "not journalled"
        return AckMessage.STATUS_OK, "OK"


@register_channel("dingtalk")
class DingTalkChannel(SdkThreadChannel):
    """DingTalk through dingtalk-stream: Stream mode in, the robot APIs out."""

    name = "dingtalk"
    single_receiver = True
    answered_anywhere = True

    @classmethod
    def preflight(cls, cfg: Config) -> str | None:
        """DingTalk needs the app's Client ID and Client Secret."""
        if not cfg.dingtalk_client_id or not cfg.dingtalk_client_secret:
            return ("dingtalk_client_id or dingtalk_client_secret is empty: create an app with a bot in the "
                    "DingTalk developer console and copy its Client ID (AppKey) and Client Secret (AppSecret)")
        return None

    def __init__(self, config: Config) -> None:
        #: dingtalk-stream's thread (its own loop); stop_intake stops that loop
        super().__init__(SdkThread("dingtalk-stream", self._run_sdk, lambda loop: loop.call_soon_threadsafe(loop.stop),
                                   logger=logger, what="dingtalk: the Stream thread", join_timeout_s=JOIN_TIMEOUT_S))
        self.config = config
        self.endpoint = DINGTALK_OPENAPI_ENDPOINT.rstrip("/")
        #: the bot's loop, where the SDK's thread hands messages over (None until started)
        self.event_loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._token: tuple[str, float] = ("", 0.0)
        self._token_lock = asyncio.Lock()
        self._client: dingtalk_stream.DingTalkStreamClient | None = None

    # --- lifecycle ------------------------------------------------------------------------------
    async def check(self) -> str | None:
        """The credentials, checked with one call (an access token); DingTalk out of reach is no problem yet."""
        self.event_loop = asyncio.get_running_loop()
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=SEND_TIMEOUT_S))
        problem = self.preflight(self.config)
        if problem is None:
            try:
                await self._access_token(fresh=True)
            except DingTalkError as exc:
                if exc.status in (400, 401, 403):
                    problem = (f"DingTalk rejected dingtalk_client_id / dingtalk_client_secret ({exc.code}: "
                               "check the Client ID and Client Secret in the developer console)")
                else:
                    logger.warning("dingtalk: %s; retried in the background", exc)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                logger.warning("dingtalk: cannot reach DingTalk at %s yet (%s: %s); the connection is retried in "
                               "the background", self.endpoint, type(exc).__name__, exc)
        return problem

    def intake_place(self) -> str:
        return f"Stream mode, {self.endpoint}"

    async def stop(self) -> None:
        """Stop receiving and close the HTTP session."""
        try:
            await super().stop()
        finally:
            session, self._session = self._session, None
            if session is not None:
                await session.close()

    def _run_sdk(self, loop: asyncio.AbstractEventLoop) -> None:
        """The SDK's thread: its own loop running the Stream client until stopped."""

        def not_while_stopping(record: logging.LogRecord) -> bool:
            return not self._sdk.stopping.is_set()  # the SDK logs the close at stop as a network error

        sdk_logger.addFilter(not_while_stopping)
        credential = dingtalk_stream.Credential(self.config.dingtalk_client_id, self.config.dingtalk_client_secret)
        client = self._client = dingtalk_stream.DingTalkStreamClient(credential, logger=sdk_logger)
        client.register_callback_handler(ChatbotMessage.TOPIC, _Handler(self))
        task = loop.create_task(client.start())
        try:
            loop.run_until_complete(task)
        except RuntimeError:
            pass  # stopped (loop.stop at stop_intake)
        except Exception:  # noqa: BLE001 - nothing in this thread may take the bot down
            logger.exception("dingtalk: the Stream connection stopped")
        finally:
            websocket = client.websocket
            if websocket is not None:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(_close_within(websocket, 2.0))
            for _ in range(3):  # the SDK catches one cancellation and sleeps: cancel it again
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                if not pending:
                    break
                for t in pending:
                    t.cancel()
                with contextlib.suppress(Exception):
                    loop.run_until_complete(asyncio.wait(pending, timeout=0.5))
            sdk_logger.removeFilter(not_while_stopping)

    # --- sending --------------------------------------------------------------------------------
    async def _access_token(self, fresh: bool = False) -> str:
        async with self._token_lock:
            token, expires = self._token
            if token and not fresh and time.monotonic() < expires:
                return token
            body = {"appKey": self.config.dingtalk_client_id, "appSecret": self.config.dingtalk_client_secret}
            found = await self._post("/v1.0/oauth2/accessToken", body, "getting an access token", token="")
            token = str(found.get("accessToken") or "")
            if not token:
                raise DingTalkError(200, "noToken", "the answer carried no accessToken", "getting an access token")
            self._token = (token, time.monotonic() + max(60, int(found.get("expireIn") or 7200) - 300))
            return token

    async def _post(self, path: str, body: dict[str, Any], what: str, token: str | None = None) -> dict[str, Any]:
        if self._session is None:
            raise BotError("dingtalk: the channel is stopped")
        headers = {"Content-Type": "application/json"}
        if token:
            headers["x-acs-dingtalk-access-token"] = token
        async with self._session.post(self.endpoint + path, data=json.dumps(body), headers=headers) as response:
            try:
                answer = await response.json(content_type=None)
            except ValueError:
                answer = {}
            if response.status != 200:
                answer = answer if isinstance(answer, dict) else {}
                raise DingTalkError(response.status, str(answer.get("code", "")), str(answer.get("message", "")),
                                    what)
            return answer if isinstance(answer, dict) else {}

    #: pictures are fetched through the robot's file API; voice comes with DingTalk's own transcript (DESIGN §5.1)
    fetches_media = True

    async def download(self, msg: IncomingMessage) -> bytes | None:
        """A picture's (or voice message's) bytes: ``/v1.0/robot/messageFiles/download`` gives a short-lived URL."""
        code = str(msg.extra.get("download_code") or "")
        if not code:
            raise ValueError("the message carries no download code")
        robot = str(msg.extra.get("robot_code") or self.config.dingtalk_client_id)
        found = await self._post("/v1.0/robot/messageFiles/download", {"downloadCode": code, "robotCode": robot},
                                 "getting a file's address", await self._access_token())
        url = str(found.get("downloadUrl") or "")
        if not url or self._session is None:
            raise ValueError("DingTalk gave no download address")
        async with self._session.get(url) as response:
            response.raise_for_status()
            data = await response.content.read(MAX_MEDIA_BYTES + 1)
        if len(data) > MAX_MEDIA_BYTES:
            raise ValueError(f"the file is larger than {MAX_MEDIA_BYTES:,} bytes")
        return data

    async def send(self, to: IncomingMessage, text: str) -> None:
        """The whole answer as markdown messages of at most :data:`MESSAGE_LIMIT` characters, in order."""
        robot = str(to.extra.get("robot_code") or self.config.dingtalk_client_id)
        for piece in split_text(text, MESSAGE_LIMIT):
            param = json.dumps({"title": _title(piece), "text": piece}, ensure_ascii=False)
            body: dict[str, Any] = {"robotCode": robot, "msgKey": "sampleMarkdown", "msgParam": param}
            if to.is_group:
                body["openConversationId"] = to.chat_id
                path = "/v1.0/robot/groupMessages/send"
            else:
                body["userIds"] = [str(to.extra.get("staff_id") or to.user_id)]
                path = "/v1.0/robot/oToMessages/batchSend"
            try:
                await self._post(path, body, "sending a message", await self._access_token())
            except DingTalkError as exc:
                if exc.status != 401:
                    raise
                await self._post(path, body, "sending a message", await self._access_token(fresh=True))

    def retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        """Network errors, 5xx and rate limits are tried again; other refusals are not."""
        if isinstance(exc, DingTalkError):
            return 0.0 if exc.status >= 500 or exc.status in (401, 429) else None
        if isinstance(exc, aiohttp.ClientError):
            return 0.0
        return super().retry_delay(exc, attempt)


def _title(text: str) -> str:
    """A markdown message's title (shown in the chat list): its first line, short."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    plain = re.sub(r"[#*_`>~]", "", first).strip(" -")
    return plain[:40] or "…"


async def _close_within(websocket: Any, seconds: float) -> None:
    """Close the SDK's websocket, giving up after ``seconds``."""
    async with asyncio.timeout(seconds):
        await websocket.close()
