"""What the conversation pages show: read from the database (every process on a shared PostgreSQL sees the
same; the queries are the sessions repository's, store/sessions.py) and from the memory folder, never from one
process's memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.turns import content_text
from summaries.facts import KEPT_MARK, check_summary
from summaries.text import user_texts

#: Conversations listed at most on one page.
LIST_LIMIT = 100
#: The transcript shows at most this many of a conversation's last messages.
TRANSCRIPT_LIMIT = 2000
#: A tool result or message longer than this is shown cut, with its length.
SHOWN_CHARS = 4000


@dataclass
class ShownMessage:
    """A stored message as the transcript shows it."""

    seq: int
    role: str
    text: str
    created_at: datetime
    tools: list[str] = field(default_factory=list)
    cut: int = 0  # the original length when the text was cut


@dataclass
class ShownTurn:
    """One turn: a user message and everything the assistant did for it."""

    messages: list[ShownMessage]
    in_context: bool


@dataclass
class SummaryCheck:
    """How much of the covered users' facts the model's summary kept (its ``(kept)`` lines put back the rest)."""

    found: int
    total: int
    kept_lines: int

    @property
    def share(self) -> float:
        """The share of facts the model's own lines kept (1.0 when there were none)."""
        return self.found / self.total if self.total else 1.0


Stored = tuple[int, dict, datetime]


def shown(seq: int, message: dict[str, Any], created_at: datetime) -> ShownMessage:
    """A stored message for the page: its text (cut when very long) and the tools it called."""
    text = content_text(message.get("content"))
    tools = [str(call.get("function", {}).get("name", "?")) for call in message.get("tool_calls") or []
             if isinstance(call, dict)]
    cut = 0
    if len(text) > SHOWN_CHARS:
        cut, text = len(text), text[:SHOWN_CHARS]
    return ShownMessage(seq=seq, role=str(message.get("role", "?")), text=text, created_at=created_at, tools=tools,
                        cut=cut)


def transcript(messages: list[tuple[int, dict, datetime]], context_start_seq: int) -> list[ShownTurn]:
    """The messages by turn; a turn is in the context when it starts at or after the boundary."""
    turns: list[ShownTurn] = []
    for seq, message, at in messages:
        item = shown(seq, message, at)
        if item.role == "user" or not turns:
            turns.append(ShownTurn(messages=[item], in_context=seq >= context_start_seq))
        else:
            turns[-1].messages.append(item)
    return turns


def summary_check(summary: str | None, summary_turns: int, context_start_seq: int,
                  messages: list[tuple[int, dict, datetime]]) -> SummaryCheck | None:
    """The fact check of the injected summary against the users' texts of the turns it covers.

    The covered turns are the ``summary_turns`` last ones before the boundary. The summary's ``(kept)``
    lines are left out of the check: they are what the check put back, not what the model kept.
    """
    if not summary or summary_turns <= 0:
        return None
    before = [m for seq, m, _ in messages if seq < context_start_seq]
    starts = [i for i, m in enumerate(before) if m.get("role") == "user"]
    if not starts:
        return None
    covered = before[starts[-min(summary_turns, len(starts))]:]
    lines = summary.splitlines()
    model_lines = "\n".join(line for line in lines if KEPT_MARK not in line)
    kept = sum(1 for line in lines if KEPT_MARK in line)
    result = check_summary(model_lines, user_texts(covered))
    return SummaryCheck(found=result.found, total=result.total, kept_lines=kept)
