"""Counting what a chat load got back: answered once, lost, duplicated, out of order.

Load scripts send numbered messages ``c<chat> m<i>`` and the fake model answers ``echo: <text>``, so each
``sendMessage`` names the message it answers. :func:`tally` compares what was sent with what the fake Bot
API received, per chat in the order it received it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

REPLY = re.compile(r"^echo: c(\d+) m(\d+)$")


def message_text(chat: int, index: int) -> str:
    """The text of a chat's ``index``-th message."""
    return f"c{chat} m{index}"


@dataclass
class Tally:
    """The counts of one run, and which messages were lost or duplicated."""

    sent: int = 0
    answered_once: int = 0
    lost: list[tuple[int, int]] = field(default_factory=list)
    duplicated: list[tuple[int, int]] = field(default_factory=list)
    #: chats whose replies came in another order than their messages, with that order
    out_of_order: dict[int, list[int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every message answered exactly once, in order."""
        return not (self.lost or self.duplicated or self.out_of_order)

    def counts(self) -> dict[str, int]:
        """The figures, for a table."""
        return {"sent": self.sent, "answered once": self.answered_once, "lost": len(self.lost),
                "duplicated": len(self.duplicated), "out of order": self.inversions}

    @property
    def inversions(self) -> int:
        """Replies that came after a reply to a later message of the same chat."""
        return sum(1 for seq in self.out_of_order.values() for a, b in zip(seq, seq[1:], strict=False) if b < a)

    def describe(self) -> str:
        """One line naming what went wrong (for assertion messages)."""
        def names(keys: list[tuple[int, int]]) -> str:
            return ", ".join(message_text(c, i) for c, i in keys[:20]) + (" …" if len(keys) > 20 else "")
        return (f"{self.counts()}; lost: [{names(self.lost)}]; duplicated: [{names(self.duplicated)}]; "
                f"out of order: {dict(list(self.out_of_order.items())[:5])}")


def replies_by_chat(sent_messages: Iterable[dict[str, Any]]) -> dict[int, list[int]]:
    """Per chat, the message numbers the bot's numbered answers name, in the order they arrived."""
    order: dict[int, list[int]] = defaultdict(list)
    for message in sent_messages:
        match = REPLY.match(str(message.get("text") or ""))
        if match:
            order[int(match[1])].append(int(match[2]))
    return order


def tally(sent: Iterable[tuple[int, int]], sent_messages: Iterable[dict[str, Any]]) -> Tally:
    """Count ``sent`` ((chat, index) pairs) against the bot's messages (the fake Bot API's ``sent``).

    Only the chats of ``sent`` count. A chat is out of order when a reply to an earlier message came after
    a reply to a later one.
    """
    sent = list(sent)
    chats = {chat for chat, _ in sent}
    order = {chat: indexes for chat, indexes in replies_by_chat(sent_messages).items() if chat in chats}
    answers: dict[tuple[int, int], int] = defaultdict(int)
    for chat, indexes in order.items():
        for i in indexes:
            answers[(chat, i)] += 1
    result = Tally(sent=len(sent))
    for key in sent:
        n = answers.get(key, 0)
        if n == 1:
            result.answered_once += 1
        elif n == 0:
            result.lost.append(key)
        else:
            result.duplicated.append(key)
    for chat, indexes in order.items():
        if any(b < a for a, b in zip(indexes, indexes[1:], strict=False)):
            result.out_of_order[chat] = indexes
    return result
