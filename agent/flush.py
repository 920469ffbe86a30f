"""The memory flush (``memory_flush``, after OpenClaw's pre-compaction flush): before turns are trimmed, one
model call, with only ``memory_write`` offered, to save what matters from them. The user sees nothing.

The call sees the turns about to leave the context as a plain transcript (so no tool-call pairing can be
broken and the request stays small), and every ``memory_write`` call it makes is carried out through
``write_note``. A failing call is logged and ignored: the trim and its summary go ahead regardless.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from core.llm import Usage
from core.turns import CtxMessage, content_text

logger = logging.getLogger(__name__)

#: The transcript shown to the flush call is cut to its last this many characters.
TRANSCRIPT_MAX_CHARS = 40_000
FLUSH_PROMPT = (
    "The conversation below is about to leave your working context. Before it does, save what will matter "
    "later (facts about the user, decisions, commitments, preferences, names, dates, numbers) by calling "
    "memory_write once per fact, each a short self-contained sentence. Save nothing that is trivial or "
    "already in your long-term notes. Do not answer the user; if nothing is worth saving, reply NONE."
)
MEMORY_WRITE_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "memory_write",
        "description": "Save one durable note to this conversation's long-term notes (MEMORY.md).",
        "parameters": {"type": "object", "properties": {
            "text": {"type": "string", "description": "the note, one short self-contained sentence"}},
            "required": ["text"]},
    },
}


def transcript(messages: Iterable[Any], max_chars: int = TRANSCRIPT_MAX_CHARS) -> str:
    """User and assistant texts as ``role: text`` lines (CtxMessage or dict), cut to the last ``max_chars``."""
    lines = []
    for item in messages:
        message = item.message if isinstance(item, CtxMessage) else item
        role = message.get("role")
        text = content_text(message.get("content")).strip()
        if role in ("user", "assistant") and text:
            lines.append(f"{role}: {text}")
    text = "\n\n".join(lines)
    return text[-max_chars:] if len(text) > max_chars else text


async def flush_before_trim(llm: Any, messages: Iterable[Any], write_note: Callable[[str], Awaitable[str]], *,
                            model: str | None = None, system: str = "", session_id: str = "") -> Usage:
    """One model call to save what matters from ``messages`` with memory_write; return its token usage."""
    text = transcript(messages)
    if not text:
        return Usage()
    request = [{"role": "system", "content": (system + "\n\n" if system else "") + FLUSH_PROMPT},
               {"role": "user", "content": f"Conversation about to leave the context:\n\n{text}"}]
    started = time.perf_counter()
    try:
        response = await llm.complete(request, tools=[MEMORY_WRITE_SCHEMA], model=model, temperature=0)
    except Exception as exc:  # noqa: BLE001 - the flush is best effort; the trim goes ahead
        logger.warning("session %s: memory flush failed: %s", session_id, exc)
        return Usage()
    saved = 0
    for call in response.tool_calls:
        if call.name != "memory_write":
            logger.warning("session %s: memory flush asked for tool %s; ignored", session_id, call.name)
            continue
        try:
            args = json.loads(call.arguments or "{}")
            note = args.get("text") if isinstance(args, dict) else None
            if not isinstance(note, str):
                raise ValueError("memory_write needs a string 'text'")
            result = await write_note(note)
        except Exception as exc:  # noqa: BLE001 - one bad call does not stop the others
            logger.warning("session %s: memory flush could not save a note: %s", session_id, exc)
            continue
        if result.startswith("Saved"):
            saved += 1
    usage = response.usage
    logger.info("session %s: memory flush saved %d of %d notes in %.0f ms (prompt %d, completion %d tokens)",
                session_id, saved, len(response.tool_calls), (time.perf_counter() - started) * 1000,
                usage.prompt_tokens, usage.completion_tokens)
    return usage
