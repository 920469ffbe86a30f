"""The feishu channel: Feishu / Lark bots over lark-oapi's WebSocket long connection (no public address).

Receiving: lark-oapi's ``ws.Client`` (discovery at ``{domain}/callback/ws/endpoint``, then protobuf frames over
a WebSocket) runs its own asyncio loop and blocks, so it runs in a thread of its own, as the wechat channel runs
itchat. The SDK keeps its loop in a module global (``lark_oapi.ws.client.loop``), taken from the importing
thread; the thread sets it to its own loop before starting the client. Each ``im.message.receive_v1`` event is
turned into an :class:`IncomingMessage` and handed to the dispatcher on the main loop, and the SDK's handler
returns only once the message is journalled: the SDK acks the event frame after its handler returns, so
nothing is confirmed to Feishu before it is journalled (an event not acked is delivered again, and the
journal's unique ``(channel, message_id)`` makes a redelivery a duplicate that is not answered twice). A
message the journal refused makes the handler raise, so the SDK answers 500 and Feishu delivers it again.

Sending goes through lark-oapi's API client (:mod:`channels.feishu.api`) in worker threads: answers are message
cards with a markdown element (Feishu's card Markdown: bold, italics, links, lists, code), split at
:data:`MESSAGE_LIMIT` characters; streamed answers are one card patched in place (:mod:`channels.feishu.stream`).

Of several processes on one database, only the elected one holds the long connection (``single_receiver``);
any can send (``answered_anywhere``: the API takes a reply from anywhere). A rejected App ID or App Secret, or an
app whose bot is not enabled, is one line at start and the channel stays off; the other channels keep running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lark_oapi.api.im.v1 import P2ImMessageReceiveV1

from channels.feishu.api import MESSAGE_LIMIT, RETRYABLE_CODES, FeishuAPI, FeishuError, credential_problem, domain_url
from channels.registry import register_channel
from channels.sdk_thread import SdkThread, SdkThreadChannel
from channels.text import split_text
from core.messages import IncomingMessage, ReplyStream

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

#: seconds the SDK's handler waits for the journal before it gives up (the event is then delivered again)
JOURNAL_TIMEOUT_S = 60.0
#: seconds stop() waits for the SDK's thread
JOIN_TIMEOUT_S = 5.0
#: what a message that is not text is called in ``IncomingMessage.content_type``
CONTENT_TYPES = {"image": "photo", "audio": "voice", "media": "video", "file": "document", "sticker": "sticker"}
#: the reaction shown on a message while it is being answered (Feishu's emoji type)
TYPING = "Typing"
#: the largest photo or voice message read
MAX_MEDIA_BYTES = 20 * 1000 * 1000
_MENTION_KEY = re.compile(r"@_user_\d+")


class _NotWhileStopping(logging.Filter):
    """Drops lark-oapi's records while the channel closes the connection (it logs the close as an error)."""

    def __init__(self, stopping: threading.Event) -> None:
        super().__init__()
        self.stopping = stopping

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.stopping.is_set()


def _quiet_sdk_logger(stopping: threading.Event) -> None:
    """lark-oapi logs to stdout through its own handler; send its records through ours instead, and none of
    them while the connection is being closed."""
    sdk = logging.getLogger("Lark")
    for handler in list(sdk.handlers):
        sdk.removeHandler(handler)
    for old in [f for f in sdk.filters if isinstance(f, _NotWhileStopping)]:
        sdk.removeFilter(old)
    sdk.addFilter(_NotWhileStopping(stopping))
    sdk.propagate = True


def message_text(message_type: str, content: dict[str, Any]) -> str:
    """The text of a text or rich-text (post) message."""
    if message_type == "text":
        return str(content.get("text") or "")
    if message_type == "post":
        post = content
        if "content" not in post:  # keyed by language
            post = next((v for v in content.values() if isinstance(v, dict)), {})
        lines = [str(post.get("title") or "")] if post.get("title") else []
        for line in post.get("content") or []:
            parts = []
            for element in line if isinstance(line, list) else []:
                tag = element.get("tag")
                if tag in ("text", "a", "code_block"):
                    parts.append(str(element.get("text") or ""))
                elif tag == "at":
                    parts.append("@" + str(element.get("user_name") or element.get("user_id") or ""))
            lines.append("".join(parts))
        return "\n".join(lines)
    return ""


def _first_image(content: dict[str, Any]) -> str:
    """The image key of a post's first picture, or ""."""
    post = content if "content" in content else next((v for v in content.values() if isinstance(v, dict)), {})
    for line in post.get("content") or []:
        for element in line if isinstance(line, list) else []:
            if isinstance(element, dict) and element.get("tag") == "img" and element.get("image_key"):
                return str(element["image_key"])
    return ""


@register_channel("feishu")
class FeishuChannel(SdkThreadChannel):
    """Feishu / Lark through lark-oapi: WebSocket events in, API calls out."""

    name = "feishu"
    #: one process holds the long connection (DESIGN §10)
    single_receiver = True
    #: any process can reply through the API
    answered_anywhere = True

    @classmethod
    def preflight(cls, cfg: Config) -> str | None:
        """Feishu needs the app's ID and secret."""
        if not cfg.feishu_app_id or not cfg.feishu_app_secret:
            return ("feishu_app_id or feishu_app_secret is empty: create an app in the Feishu (or Lark) developer "
                    "console and copy its App ID and App Secret to config.json")
        return None

    def __init__(self, config: Config) -> None:
        #: lark-oapi's thread (its own loop, in the module global the SDK reads)
        super().__init__(SdkThread("feishu-ws", self._run_ws, self._interrupt_ws, logger=logger,
                                   what="feishu: the connection thread", join_timeout_s=JOIN_TIMEOUT_S))
        self.config = config
        self.domain = domain_url(config.feishu_domain)
        self.api = FeishuAPI(config.feishu_app_id, config.feishu_app_secret, config.feishu_domain)
        #: the bot's open id, for @-mentions (read at start)
        self.bot_open_id = ""
        #: seconds between two updates of a streamed card
        self.edit_interval = 0.6
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ws: Any = None
        #: the "Typing" reaction on each message being answered: message id -> reaction id
        self._reactions: dict[str, str] = {}
        self._names: dict[str, str] = {}
        self._names_lock = threading.Lock()

    # --- lifecycle ------------------------------------------------------------------------------
    async def check(self) -> str | None:
        """The credentials, checked with one call (the bot's info); Feishu out of reach is no problem yet."""
        self._loop = asyncio.get_running_loop()
        problem = self.preflight(self.config)
        if problem is None:
            try:
                bot = await asyncio.to_thread(self.api.bot_info)
            except Exception as exc:  # noqa: BLE001 - whatever the SDK raises, the other channels go on
                problem = credential_problem(exc)
                if problem is None:
                    logger.warning("feishu: cannot reach Feishu at %s yet (%s: %s); the connection is retried in "
                                   "the background", self.domain, type(exc).__name__, exc)
            else:
                self.bot_open_id = str(bot.get("open_id") or "")
                self.bot_username = str(bot.get("app_name") or "")
        return problem

    def intake_place(self) -> str:
        return f"long connection to {self.domain}"

    def _interrupt_ws(self, ws_loop: asyncio.AbstractEventLoop) -> None:
        """On the bot's loop, at stop: close the connection on the SDK's loop."""
        asyncio.run_coroutine_threadsafe(self._close_ws(), ws_loop)

    async def _close_ws(self) -> None:
        """On the SDK's loop: no reconnect, close the WebSocket, stop the loop."""
        client = self._ws
        try:
            if client is not None:
                client._auto_reconnect = False  # the SDK has no public stop; this is how it ends its loop
                await client._disconnect()
        finally:
            asyncio.get_running_loop().stop()

    def _run_ws(self, loop: asyncio.AbstractEventLoop) -> None:
        """The SDK's thread: its own loop, the client, until stopped."""
        import lark_oapi as lark
        import lark_oapi.ws.client as ws_client

        _quiet_sdk_logger(self._sdk.stopping)
        orphan, ws_client.loop = ws_client.loop, loop  # the SDK runs on this module global (module docstring)
        if orphan is not loop and not orphan.is_running() and not orphan.is_closed():
            orphan.close()  # the loop the SDK made for itself when imported, never used
        handler = (lark.EventDispatcherHandler.builder("", "")
                   .register_p2_im_message_receive_v1(self._on_event).build())
        self._ws = ws_client.Client(self.config.feishu_app_id, self.config.feishu_app_secret,
                                    log_level=lark.LogLevel.WARNING, event_handler=handler, domain=self.domain)
        try:
            self._ws.start()
        except RuntimeError:
            if not self._sdk.stopping.is_set():
                logger.exception("feishu: the long connection stopped")
        except Exception as exc:  # noqa: BLE001 - nothing in this thread may take the bot down
            if not self._sdk.stopping.is_set():
                reason = f"the long connection failed ({type(exc).__name__}: {exc})"
                logger.error("feishu: %s; check that events are received over the long connection "
                             "(Events & Callbacks) and the app is published", reason)
                self._call_on_loop(self.fail, reason)
        finally:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))

    def _call_on_loop(self, fn: Any, *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(fn, *args)

    # --- receiving (the SDK's thread) ------------------------------------------------------------
    def _on_event(self, data: P2ImMessageReceiveV1) -> None:
        """lark-oapi's handler for ``im.message.receive_v1``: returns once the message is journalled, so the
        SDK's ack follows the journal; raises (the SDK answers 500, Feishu redelivers) when it was not."""
        incoming = self.to_incoming(data)
        if incoming is None:
            return
        loop = self._loop
        if loop is None or loop.is_closed():
            raise RuntimeError("feishu: no running loop to hand the message to")
        taken = asyncio.run_coroutine_threadsafe(self.deliver(incoming), loop).result(JOURNAL_TIMEOUT_S)
        if not taken:
            raise RuntimeError(f"feishu: message {incoming.message_id} was not journalled")

    def to_incoming(self, data: P2ImMessageReceiveV1) -> IncomingMessage | None:
        """One ``im.message.receive_v1`` event as an :class:`IncomingMessage`; None for what is no message."""
        event = data.event
        message = event.message if event is not None else None
        sender = event.sender if event is not None else None
        if message is None or not message.chat_id:
            return None
        sender_id = str(sender.sender_id.open_id or "") if sender is not None and sender.sender_id else ""
        sender_type = str(sender.sender_type or "user") if sender is not None else "user"
        message_type = str(message.message_type or "")
        try:
            content = json.loads(message.content or "{}")
        except ValueError:
            content = {}
        content = content if isinstance(content, dict) else {}
        text = message_text(message_type, content)
        mentions = list(message.mentions or [])
        if mentions and not self.bot_open_id:  # Feishu could not be reached at start: ask again now
            try:
                self.bot_open_id = str(self.api.bot_info().get("open_id") or "")
            except Exception as exc:  # noqa: BLE001 - the message goes on; a mention of the bot is missed
                logger.warning("feishu: cannot read the bot's open id (%s); @-mentions are not recognised yet", exc)
        mentions_bot = False
        for mention in mentions:
            key = str(mention.key or "")
            open_id = str(mention.id.open_id or "") if mention.id is not None else ""
            if self.bot_open_id and open_id == self.bot_open_id:
                mentions_bot = True
                text = text.replace(key, "")
            elif key:
                text = text.replace(key, "@" + str(mention.name or ""))
        text = _MENTION_KEY.sub("", text).strip()
        is_group = message.chat_type != "p2p"
        created = int(message.create_time or 0)
        when = datetime.fromtimestamp(created / 1000, UTC) if created > 0 else datetime.now(UTC)
        content_type = "text" if message_type in ("text", "post") else CONTENT_TYPES.get(message_type, "other")
        extra = {"chat_type": str(message.chat_type or "")}
        if message_type == "image" and content.get("image_key"):
            extra.update(file_key=str(content["image_key"]), resource_type="image")
        elif message_type == "audio" and content.get("file_key"):
            extra.update(file_key=str(content["file_key"]), resource_type="file", audio_format="ogg")
        elif message_type == "post":  # a post with a picture: the picture, its text the caption
            image = _first_image(content)
            if image:
                content_type = "photo"
                extra.update(file_key=image, resource_type="image")
        user_name = group_name = ""
        if is_group:
            group_name = self._name("chat:" + message.chat_id, lambda: self.api.chat_name(message.chat_id))
            user_name = self._name("user:" + sender_id, lambda: self.api.user_name(sender_id)) if sender_id else ""
        return IncomingMessage(
            channel=self.name, chat_id=str(message.chat_id), user_id=sender_id, text=text,
            user_name=user_name or sender_id, is_group=is_group, group_name=group_name, mentions_bot=mentions_bot,
            message_id=str(message.message_id or ""), time=when, content_type=content_type,
            is_from_bot=sender_type != "user",
            extra=extra)

    def _name(self, key: str, fetch: Any) -> str:
        """A group's or member's name, fetched once per process ("" when it cannot be read)."""
        with self._names_lock:
            if key in self._names:
                return self._names[key]
        try:
            name = fetch()
        except Exception as exc:  # noqa: BLE001 - a name is nice to have, the message goes on without it
            logger.debug("feishu: could not read the name of %s: %s", key, exc)
            return ""
        with self._names_lock:
            self._names[key] = name
        return name

    #: photos and voice messages are fetched through the API (DESIGN §5.1)
    fetches_media = True

    async def download(self, msg: IncomingMessage) -> bytes | None:
        """The photo or voice message's bytes (``im.v1.message_resource.get``)."""
        file_key = str(msg.extra.get("file_key") or "")
        if not file_key:
            raise ValueError("the message carries no file key")
        kind = str(msg.extra.get("resource_type") or "image")
        data = await asyncio.to_thread(self.api.resource, msg.message_id, file_key, kind)
        if len(data) > MAX_MEDIA_BYTES:
            raise ValueError(f"the file is {len(data):,} bytes; at most {MAX_MEDIA_BYTES:,} are read")
        return data

    # --- sending --------------------------------------------------------------------------------
    async def send(self, to: IncomingMessage, text: str) -> None:
        """The whole answer, as cards of at most :data:`MESSAGE_LIMIT` characters, in order."""
        reply_to = self.reply_to(to)
        for piece in split_text(text, MESSAGE_LIMIT):
            await asyncio.to_thread(self.api.send_card, to.chat_id, piece, reply_to)
            reply_to = ""
        await self.answered(to)

    @staticmethod
    def reply_to(to: IncomingMessage) -> str:
        """In groups the answer's first card replies to the question, so it is clear whom the bot answers."""
        return to.message_id if to.is_group and to.message_id.startswith("om_") else ""

    async def typing(self, to: IncomingMessage) -> None:
        """Feishu has no "typing…": a "Typing" reaction on the message being answered, taken off with the
        answer. Errors are ignored (the reaction needs no scope of its own, but a message can be gone)."""
        if not to.message_id or to.message_id in self._reactions:
            return
        self._reactions[to.message_id] = ""  # one reaction per message, even while the call is on its way
        try:
            self._reactions[to.message_id] = await asyncio.to_thread(self.api.add_reaction, to.message_id, TYPING)
        except Exception as exc:  # noqa: BLE001 - a courtesy
            logger.debug("feishu: could not add the typing reaction: %s", exc)

    async def answered(self, to: IncomingMessage) -> None:
        """The answer to ``to`` is out: take its "Typing" reaction off."""
        reaction = self._reactions.pop(to.message_id, None) if to.message_id else None
        if reaction:
            try:
                await asyncio.to_thread(self.api.remove_reaction, to.message_id, reaction)
            except Exception as exc:  # noqa: BLE001 - a courtesy
                logger.debug("feishu: could not remove the typing reaction: %s", exc)

    def open_stream(self, to: IncomingMessage) -> ReplyStream | None:
        """A card sent at the first words and patched as the answer grows."""
        from channels.feishu.stream import FeishuReplyStream

        return FeishuReplyStream(self, to)

    def retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        """An expired token or a rate limit is tried again; any other refusal is not."""
        if isinstance(exc, FeishuError):
            return 0.0 if exc.code in RETRYABLE_CODES or exc.code >= 500 and exc.code < 600 else None
        return super().retry_delay(exc, attempt)
