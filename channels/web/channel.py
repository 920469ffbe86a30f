"""The web chat channel: messages typed on a page of the web console, answers streamed back to it.

The channel itself serves nothing: the console mounts the pages (``console/chat_page.py``) on its own aiohttp
server, and they call :meth:`WebChannel.receive` for each message a visitor sends and
:meth:`WebChannel.subscribe` for the Server-Sent Events stream of a visitor's page. So the channel stays below
the console (it imports only core, config and channels), and ``channel_type`` ``"web"`` needs the console on.

A message is answered like any other channel's: it is journalled before :meth:`receive` returns (the page
shows an error when it was not), answered once, and after a crash answered at the next start. What the bot
sends to a visitor is published to every open page of that visitor (:class:`Hub`); a page that reconnects to
the same process gets what it missed from a short buffer, and one that reconnects to a new process (a restart)
reloads the history from the database, then gets the answers that are still to come.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from channels.base import BaseChannel
from channels.registry import register_channel
from channels.web.render import render_markdown
from channels.web.visitors import OPERATOR_ID, RateLimit
from core.messages import IncomingMessage, ReplyStream

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

#: events kept per visitor for a page that reconnects to this process
BUFFERED_EVENTS = 200
#: visitors whose events are kept at most (the least recently active go first)
MAX_CHATS = 5_000
#: the longest message a visitor may send, in characters
MAX_MESSAGE_CHARS = 8_000


@dataclass(slots=True, eq=False)
class Subscription:
    """One open page of a visitor: its queue of events (None ends it)."""

    chat_id: str
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)


class Hub:
    """The events of each visitor: published to their open pages and kept a while for reconnects.

    An event id is ``<boot>-<n>``: ``boot`` is random per process, so a page that reconnects to another
    process (or after a restart) is told to reload its history instead of getting a replay.
    """

    def __init__(self) -> None:
        self.boot = secrets.token_hex(4)
        self._ids = itertools.count(1)
        self._buffers: OrderedDict[str, deque[dict[str, Any]]] = OrderedDict()
        self._subs: dict[str, set[Subscription]] = {}

    def publish(self, chat_id: str, event: dict[str, Any], *, keep: bool = True) -> dict[str, Any]:
        """Send ``event`` to ``chat_id``'s open pages and keep it (unless ``keep`` is False: "typing…");
        returns it with its id."""
        if not keep:
            for sub in self._subs.get(chat_id, ()):
                sub.queue.put_nowait(event)
            return event
        event = {**event, "id": f"{self.boot}-{next(self._ids)}"}
        buffer = self._buffers.pop(chat_id, None) or deque(maxlen=BUFFERED_EVENTS)
        buffer.append(event)
        self._buffers[chat_id] = buffer
        while len(self._buffers) > MAX_CHATS:
            self._buffers.popitem(last=False)
        for sub in self._subs.get(chat_id, ()):
            sub.queue.put_nowait(event)
        return event

    def subscribe(self, chat_id: str, last_event_id: str | None) -> tuple[Subscription, list[dict[str, Any]], bool]:
        """Open a page's stream: (subscription, events it missed, resumed). ``resumed`` is False when the page
        must reload its history (a first connection, another process, or a gap the buffer no longer holds)."""
        sub = Subscription(chat_id)
        self._subs.setdefault(chat_id, set()).add(sub)
        buffer = list(self._buffers.get(chat_id, ()))
        if not last_event_id or not last_event_id.startswith(self.boot + "-"):
            return sub, [], False
        ids = [e["id"] for e in buffer]
        if last_event_id in ids:
            return sub, buffer[ids.index(last_event_id) + 1:], True
        return sub, [], False

    def unsubscribe(self, sub: Subscription) -> None:
        """Close one page's stream."""
        subs = self._subs.get(sub.chat_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.chat_id]

    def close(self) -> None:
        """End every open stream (the channel stops)."""
        for subs in list(self._subs.values()):
            for sub in subs:
                sub.queue.put_nowait(None)


class WebReplyStream(ReplyStream):
    """One answer shown on the visitor's pages while it is written: each push is the answer so far, rendered."""

    def __init__(self, hub: Hub, chat_id: str) -> None:
        self.hub = hub
        self.chat_id = chat_id
        self._new()

    def _new(self) -> None:
        self.stream = secrets.token_hex(6)
        self.text = ""

    async def push(self, text: str) -> None:
        if text == self.text:
            return
        self.text = text
        self.hub.publish(self.chat_id, {"kind": "partial", "stream": self.stream, "html": render_markdown(text)})

    async def discard(self) -> None:
        if self.text:
            self.hub.publish(self.chat_id, {"kind": "discard", "stream": self.stream})
        self._new()

    async def finish(self, text: str) -> None:
        self.hub.publish(self.chat_id, {"kind": "final", "stream": self.stream, "html": render_markdown(text),
                                        "text": text})


@register_channel("web")
class WebChannel(BaseChannel):
    """The web chat (DESIGN §5): the console's ``/chat`` page and, with ``web_chat_public``, ``/chat/public``."""

    name = "web"
    #: the page shows each answer under its question, from the history: a resumed answer needs no quote of it
    threads_replies = True

    def __init__(self, config: Config | None = None) -> None:
        super().__init__()
        self.config = config
        self.hub = Hub()
        self.rate = RateLimit()
        self.running = False

    @classmethod
    def preflight(cls, cfg: Config) -> str | None:
        if not cfg.web_console_port:
            return ("the web chat is a page of the web console, which is off (web_console_port is 0): set "
                    "web_console_port (default 8700)")
        return None

    async def start(self, intake: bool = True) -> None:
        """Nothing to connect: the console mounts the pages; messages are taken from now on."""
        self.running = True

    async def stop(self) -> None:
        self.running = False
        self.hub.close()

    def console_failed(self, reason: str) -> None:
        """The console that serves the pages could not start: this channel cannot run."""
        self.fail(f"the web console did not start ({reason})")

    async def receive(self, visitor: str, text: str, client_id: str, *, operator: bool = False,
                      name: str = "") -> bool:
        """A message typed on a page: journalled (True), or not (False, the page says so). ``client_id`` is the
        page's id for it, so a resent post is a duplicate, not a second question."""
        message = IncomingMessage(
            channel=self.name, chat_id=visitor, user_id=visitor, text=text,
            user_name=name or ("operator" if visitor == OPERATOR_ID else "visitor"),
            message_id=f"{visitor}:{client_id}", extra={"operator": True} if operator else {})
        self.hub.publish(visitor, {"kind": "user", "text": message.text, "client": client_id})
        return await self.deliver(message)

    async def send(self, to: IncomingMessage, text: str) -> None:
        self.hub.publish(to.chat_id, {"kind": "reply", "html": render_markdown(text), "text": text})

    def open_stream(self, to: IncomingMessage) -> ReplyStream | None:
        return WebReplyStream(self.hub, to.chat_id)

    async def typing(self, to: IncomingMessage) -> None:
        self.hub.publish(to.chat_id, {"kind": "typing"}, keep=False)
