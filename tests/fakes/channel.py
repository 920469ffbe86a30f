"""A recording channel: messages are fed in by the test, replies are recorded."""

from __future__ import annotations

import asyncio
import itertools

from channels.base import BaseChannel
from core.messages import IncomingMessage

_ids = itertools.count(1)


class RecordingChannel(BaseChannel):
    """A channel with no platform behind it."""

    def __init__(self, name: str = "telegram", bot_username: str = "testbot") -> None:
        super().__init__()
        self.name = name
        self.bot_username = bot_username
        self.operator_only = name == "terminal"  # as the real terminal channel
        self.sent: list[tuple[IncomingMessage, str]] = []
        self.typing_calls = 0
        self._changed = asyncio.Event()

    async def start(self, intake: bool = True) -> None:
        """Nothing to connect."""

    async def stop(self) -> None:
        """Nothing to disconnect."""

    async def send(self, to: IncomingMessage, text: str) -> None:
        """Record a reply."""
        self.sent.append((to, text))
        self._changed.set()

    async def typing(self, to: IncomingMessage) -> None:
        """Count typing indications."""
        self.typing_calls += 1

    def texts(self) -> list[str]:
        """The replies' text, in order."""
        return [text for _, text in self.sent]

    async def wait_for(self, n: int, within: float = 5.0) -> list[str]:
        """Wait until ``n`` replies were sent."""
        async with asyncio.timeout(within):
            while len(self.sent) < n:
                self._changed.clear()
                await self._changed.wait()
        return self.texts()

    def message(self, text: str, *, chat_id: str = "100", user_id: str = "100", user_name: str = "Alice",
                is_group: bool = False, group_name: str = "", message_id: str | None = None,
                **kw) -> IncomingMessage:
        """Build an incoming message from this channel."""
        return IncomingMessage(channel=self.name, chat_id=chat_id, user_id=user_id, user_name=user_name, text=text,
                               is_group=is_group, group_name=group_name,
                               message_id=message_id if message_id is not None else str(next(_ids)), **kw)
