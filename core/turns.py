"""Turn rules, in one place: what a turn is, how messages group into turns, and how a turn is reduced to text.

A **turn** is one user message followed by everything the assistant did for it (assistant messages with
``tool_calls``, ``tool`` results, the final answer). The context engine, restart recovery and the
summariser all use these functions; none keeps a copy of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class CtxMessage:
    """One message in a session's in-memory context."""

    seq: int  # the message's seq in the store; 0 for a synthetic message
    message: dict[str, Any]  # OpenAI chat-format message (may be a trimmed copy of the stored one)
    tokens: int | None = None  # cached token count; reset whenever `message` is replaced
    truncated: bool = False  # historical tool-result truncation already applied


@dataclass(slots=True)
class Turn:
    """One user message, then everything the assistant did for it."""

    messages: list[CtxMessage] = field(default_factory=list)

    @property
    def first_seq(self) -> int:
        """The seq of the turn's first message."""
        return self.messages[0].seq

    @property
    def last_seq(self) -> int:
        """The seq of the turn's last message."""
        return self.messages[-1].seq

    @property
    def opens_with_user(self) -> bool:
        """True unless the turn is the messages found before any user message."""
        return bool(self.messages) and self.messages[0].message.get("role") == "user"

    @property
    def user_text(self) -> str:
        """The text of the turn's first user message, or ""."""
        user = self.user_message
        return content_text(user.message.get("content")) if user is not None else ""

    @property
    def final_text(self) -> str:
        """The text of the turn's answer (see :attr:`final_message`), or ""."""
        final = self.final_message
        return content_text(final.message.get("content")) if final is not None else ""

    @property
    def user_message(self) -> CtxMessage | None:
        """The turn's first user message."""
        return next((m for m in self.messages if m.message.get("role") == "user"), None)

    @property
    def final_message(self) -> CtxMessage | None:
        """The turn's answer: its last assistant message with some text (not only whitespace)."""
        for m in reversed(self.messages):
            if m.message.get("role") == "assistant" and content_text(m.message.get("content")).strip():
                return m
        return None


def content_text(content: Any, sep: str = "\n") -> str:
    """The text of a message content: the string itself, or the text parts of a list joined with ``sep`` (a
    stored message's parts are lines; a model's answer in parts, ``agent/completion.py``, is joined with "");
    "" for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return sep.join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def group_turns(msgs: list[CtxMessage]) -> list[Turn]:
    """Split messages into turns; a turn starts at each user message (leading others form their own turn)."""
    turns: list[Turn] = []
    current: list[CtxMessage] | None = None
    for m in msgs:
        if current is None or m.message.get("role") == "user":
            current = []
            turns.append(Turn(current))
        current.append(m)
    return turns


def conversation_turns(msgs: list[CtxMessage]) -> list[Turn]:
    """The turns that open with a user message: messages before the first user message are left out."""
    return [t for t in group_turns(msgs) if t.opens_with_user]


def plain_turns(messages: list[dict[str, Any]]) -> list[Turn]:
    """:func:`conversation_turns` of plain chat-format dicts (seqs unknown: 0)."""
    return conversation_turns([CtxMessage(0, m) for m in messages])


def text_only(turn: Turn) -> Turn:
    """The turn reduced to text: its first user text and its answer's text, each keeping its seq.

    A message that is already plain text is reused as is, and a turn that is already text only is
    returned itself, so callers can tell whether anything changed (``result is turn``).
    """
    user, final = turn.user_message, turn.final_message
    out: list[CtxMessage] = []
    if user is not None:
        if isinstance(user.message.get("content"), str) and set(user.message) <= {"role", "content", "name"}:
            out.append(user)
        else:
            out.append(CtxMessage(user.seq, {"role": "user", "content": content_text(user.message.get("content"))}))
    if final is not None:
        if isinstance(final.message.get("content"), str) and set(final.message) <= {"role", "content"}:
            out.append(final)
        else:
            text = content_text(final.message.get("content"))
            out.append(CtxMessage(final.seq, {"role": "assistant", "content": text}))
    if not out or (len(out) == len(turn.messages) and all(a is b for a, b in zip(out, turn.messages, strict=True))):
        return turn
    return Turn(out)


#: Restart recovery restores at least this many turns (DESIGN §4) ...
RESTORE_MIN_TURNS = 3
#: ... or one turn per this many of ``agent_max_context_turns``, whichever is more.
RESTORE_TURNS_DIVISOR = 6


def restore_turn_count(max_turns: int) -> int:
    """How many turns restart recovery restores: ``max(3, agent_max_context_turns // 6)`` (DESIGN §4).

    This is the one place the rule lives; agent/sessions.py asks it, and tests/core/test_turns.py pins it.
    """
    return max(RESTORE_MIN_TURNS, max_turns // RESTORE_TURNS_DIVISOR)
