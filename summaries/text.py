"""The text side of summaries: the prompt, the transcript of dropped turns, "none", and the fallback.

Everything here is pure. The transcript is what the summary model reads::

    Earlier summary:
    - Alice chose the blue plan

    Conversation:
    User: what does it cost?
    Assistant called tool web_fetch({"url": "https://example.com/prices"})
    Tool result (web_fetch): Blue plan: 5 EUR a month ...
    Assistant: The blue plan costs 5 EUR a month.

The transcript is made of *entries*, one per message (:func:`transcript_entries`), so that
:mod:`summaries.parts` can split it into parts that fit the summary model's window. The earlier
summary is never sent again: each summary says what is new in the turns it covers (DESIGN §1.6), and
the rolling summary injected into the context is formed without a model (:func:`roll_summary`).

The fallback, written when the model stays unavailable, has one line per turn, each marked::

    - (fallback) what does it cost? → The blue plan costs 5 EUR a month.

A turn that has no stored answer (the model was not configured, or failed) keeps the user's words alone.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from core.turns import content_text, plain_turns

logger = logging.getLogger(__name__)

SUMMARY_SYSTEM_PROMPT = (
    "You summarise part of a chat conversation that is leaving the assistant's working memory, so that "
    "nothing important is forgotten.\n"
    "Write short event-level bullet lines, each starting with \"- \". Keep decisions, conclusions, facts "
    "learned, open questions, to-dos and commitments, constraints and preferences, and the names of people, "
    "places and things (with numbers and dates). Drop greetings, thanks and chit-chat. Write in the language "
    "of the conversation. Output only the bullet lines.\n"
    "If nothing is worth keeping, answer exactly: none"
)
#: The user message before the transcript.
SUMMARY_REQUEST = "Summarise the conversation below."
#: The user message before part summaries that are merged into one list.
MERGE_REQUEST = ("Below are bullet-line summaries of consecutive parts of one conversation. Merge them into "
                 "one list of bullet lines: keep every fact, name, number and date, drop exact repeats.")
#: Marks every line of a rule-based summary written when the model failed.
FALLBACK_MARK = "(fallback)"
#: Each tool result is cut to this many characters in the transcript.
TOOL_RESULT_CHARS = 2_000
#: Each tool call's arguments are cut to this many characters.
TOOL_ARGS_CHARS = 500
#: Each user or assistant text is cut to this many characters.
MESSAGE_CHARS = 8_000
#: The whole transcript is cut to this many characters (head and tail kept).
TRANSCRIPT_CHARS = 60_000
#: Fallback lines: the user line and the reply line are cut to this many characters.
FALLBACK_LINE_CHARS = 200
#: The fallback lists at most this many turns (the most recent).
FALLBACK_MAX_TURNS = 50

_NONE = re.compile(r"[\W_]*none[\W_]*", re.IGNORECASE)
_SPACE = re.compile(r"\s+")

#: The text of a message content (a string, or the text parts of a list).
text_of = content_text


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with a note of how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [… {len(text) - limit:,} more characters]"


def count_turns(messages: list[dict[str, Any]]) -> int:
    """The number of turns (:func:`core.turns.plain_turns`): one per user message."""
    return len(plain_turns(messages))


def transcript_entries(messages: list[dict[str, Any]]) -> list[str]:
    """The dropped messages as transcript entries, one per message (an assistant's tool calls join its entry)."""
    tool_names: dict[str, str] = {}
    entries: list[str] = []
    for m in messages:
        role = m.get("role")
        text = text_of(m.get("content")).strip()
        lines: list[str] = []
        if role == "user":
            lines.append(f"User: {clip(text, MESSAGE_CHARS)}")
        elif role == "assistant":
            if text:
                lines.append(f"Assistant: {clip(text, MESSAGE_CHARS)}")
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                name = fn.get("name") or "?"
                tool_names[call.get("id") or ""] = name
                args = clip(_compact_args(fn.get("arguments")), TOOL_ARGS_CHARS)
                lines.append(f"Assistant called tool {name}({args})")
        elif role == "tool":
            name = tool_names.get(m.get("tool_call_id") or "", "?")
            lines.append(f"Tool result ({name}): {clip(text, TOOL_RESULT_CHARS)}")
        elif text:
            lines.append(f"{str(role).capitalize()}: {clip(text, MESSAGE_CHARS)}")
        if lines:
            entries.append("\n".join(lines))
    return entries


def transcript(messages: list[dict[str, Any]]) -> str:
    """The dropped messages as plain text: ``User:``/``Assistant:`` lines, tool calls and brief results."""
    return cap_transcript("\n".join(transcript_entries(messages)))


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The texts of the user messages, oldest first (what the summary check holds a summary to)."""
    return [text for m in messages if m.get("role") == "user" and (text := text_of(m.get("content")).strip())]


def _compact_args(arguments: Any) -> str:
    if not isinstance(arguments, str):
        return ""
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False)
    except ValueError:
        return arguments


def cap_transcript(text: str, limit: int = TRANSCRIPT_CHARS) -> str:
    """``text`` cut to about ``limit`` characters: two thirds from the head, one third from the tail."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[… {omitted:,} characters of the conversation left out …]\n{text[-tail:]}"


def part_request(text: str, merging: bool = False) -> list[dict[str, Any]]:
    """The summary model's request for one part: the instructions, then a transcript or part summaries."""
    body = f"{MERGE_REQUEST}\n\nPart summaries:\n{text}" if merging else f"{SUMMARY_REQUEST}\n\nConversation:\n{text}"
    return [{"role": "system", "content": SUMMARY_SYSTEM_PROMPT}, {"role": "user", "content": body}]


def build_request(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request for dropped messages that fit in one call: :func:`part_request` of their transcript."""
    return part_request(transcript(messages))


def is_none(text: str) -> bool:
    """True when the model said there is nothing worth keeping ("none", any case, punctuation allowed)."""
    return bool(_NONE.fullmatch(text.strip()))


def _one_line(text: str) -> str:
    return clip(_SPACE.sub(" ", text).strip(), FALLBACK_LINE_CHARS)


def fallback_summary(messages: list[dict[str, Any]]) -> str:
    """One ``- (fallback) <user line> → <first line of the reply>`` line per turn; "" if there is no turn.

    A turn with no stored answer (the user was told the model is not configured, or unavailable: that
    reply is not part of the conversation) keeps the user's line alone rather than claiming "no reply".
    """
    turns = [(t.user_text, t.final_text) for t in plain_turns(messages)]
    lines = []
    if len(turns) > FALLBACK_MAX_TURNS:
        lines.append(f"- {FALLBACK_MARK} [{len(turns) - FALLBACK_MAX_TURNS} earlier turns not listed]")
        turns = turns[-FALLBACK_MAX_TURNS:]
    for user, reply in turns:
        first = next((line for line in reply.splitlines() if line.strip()), "")
        answer = f" → {_one_line(first)}" if first else ""
        lines.append(f"- {FALLBACK_MARK} {_one_line(user) or '…'}{answer}")
    return "\n".join(lines)


def _line_key(line: str) -> str:
    return _SPACE.sub(" ", line.strip().lstrip("-*• ").strip()).casefold()


def new_lines(earlier: str | None, summary: str) -> str:
    """``summary`` without the lines ``earlier`` already holds (so no section repeats an earlier bullet)."""
    if not earlier:
        return summary
    known = {_line_key(line) for line in earlier.splitlines() if line.strip()}
    return "\n".join(line for line in summary.splitlines() if line.strip() and _line_key(line) not in known)


def roll_summary(earlier: str | None, new: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """The rolling summary to inject: the earlier one, then the new lines, cut to ``max_tokens`` oldest first.

    No model merges them: a merge call could drop what the earlier summary held, and the summary check
    only protects the turns a job covers. Lines that leave the rolling summary are still in the daily
    files, where ``memory_search`` finds them.
    """
    lines = [line for line in f"{(earlier or '').strip()}\n{new.strip()}".splitlines() if line.strip()]
    sizes = [count(line) + 1 for line in lines]
    total = sum(sizes)
    start = 0
    while start < len(lines) - 1 and total > max_tokens:
        total -= sizes[start]
        start += 1
    return "\n".join(lines[start:])
