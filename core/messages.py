"""The platform-neutral boundary types: one incoming message, the handlers that take it, and a reply stream.

A channel turns platform events into :class:`IncomingMessage` values and hands them to the dispatcher; a
channel that can show an answer while it is generated returns a :class:`ReplyStream`. Nothing
platform-specific crosses this boundary, so the dispatcher and the plugins import this module, not
``channels/``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from core.text import clean_text

#: ``IncomingMessage.extra`` of a message answered by crash resume (dispatcher/resume.py): True, so a channel that
#: threads replies answers the message itself (Telegram's reply_parameters) ...
RESUMED = "resumed"
#: ... and on other channels the quoted question, shown above the answer (dispatcher/replies.py ``reply_prefix``)
RESUMED_QUOTE = "resumed_quote"


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """One message from a platform, as the dispatcher sees it."""

    channel: str
    chat_id: str
    user_id: str
    text: str
    user_name: str = ""
    is_group: bool = False
    group_name: str = ""
    mentions_bot: bool = False
    reply_to_bot: bool = False
    message_id: str = ""
    time: datetime = field(default_factory=_utcnow)
    content_type: str = "text"  # "text", or what the platform sent instead ("sticker", "photo", ...)
    is_from_bot: bool = False
    #: the text and author of the message this one replies to, when that is someone else's
    reply_to_text: str = ""
    reply_to_name: str = ""
    #: channel-private routing data needed to answer later (e.g. WeChat's per-login UserName).
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Made valid at the edge: one bad character must not lose the message or break the chat for good.
        for name in ("text", "user_name", "group_name"):
            value = getattr(self, name)
            if isinstance(value, str):
                cleaned = clean_text(value)
                if cleaned is not value:
                    object.__setattr__(self, name, cleaned)

    def to_json(self) -> dict[str, Any]:
        """Serialise, so an unanswered message can be answered after a restart."""
        # (not dataclasses.asdict: it deep-copies every value, and these are plain strings and a dict)
        data = {name: getattr(self, name) for name in _FIELD_NAMES}
        data["time"] = self.time.isoformat()
        data["extra"] = dict(self.extra)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> IncomingMessage:
        """Rebuild a message stored with :meth:`to_json`."""
        data = dict(data)
        data["time"] = datetime.fromisoformat(data["time"])
        return cls(**data)


_FIELD_NAMES = tuple(f.name for f in fields(IncomingMessage))

#: What a channel calls for every incoming message; False means it was not journalled (None counts as taken).
MessageHandler = Callable[[IncomingMessage], Awaitable[bool | None]]
#: The synchronous counterpart: takes the message in arrival order and returns at once.
MessageSubmitter = Callable[[IncomingMessage], None]


class ReplyStream(ABC):
    """One reply written into the chat while the model generates it (``stream_replies``).

    The dispatcher pushes the whole answer so far (reply prefix included) as it grows, and ends every
    stream with exactly one :meth:`finish` or :meth:`discard`. The channel decides how often to show it
    (throttling is its business, so :meth:`push` returns at once).
    """

    @abstractmethod
    async def push(self, text: str) -> None:
        """The answer so far: the whole text, not a delta. Returns without waiting for the platform."""

    @abstractmethod
    async def discard(self) -> None:
        """What was pushed is not the answer (the model went on to call tools, or the turn failed).

        What the user already saw stays, completed to the last pushed text; a later push starts a new
        message, and anything not shown yet is dropped.
        """

    @abstractmethod
    async def finish(self, text: str) -> None:
        """Show exactly ``text`` as the final answer (after ``after_reply`` hooks); send it whole when
        nothing was shown yet. Raises like :meth:`BaseChannel.send` when the platform refuses it."""
