"""The ``memory_search`` and ``memory_get`` tools: the calling session's memory files, and nothing else."""

from __future__ import annotations

import asyncio
import logging

from agent.tools.base import ToolContext, tool
from memory.daily import DailyMemory, valid_date

logger = logging.getLogger(__name__)

#: Most matching lines one search returns.
SEARCH_LIMIT = 50


def _memory(ctx: ToolContext) -> DailyMemory:
    return DailyMemory(ctx.data_dir / "memory", ctx.config.zone())


@tool
async def memory_search(ctx: ToolContext, query: str) -> str:
    """Search this conversation's memory files (daily summaries and long-term notes) for lines containing the query.

    Every word of the query must appear in a line (any case); results are newest first, one per line as
    ``FILE:LINE: text``.

    Args:
        query: words to look for, e.g. "Alice budget"
    """
    if not query.strip():
        return "Give a non-empty query to search the memory files."
    memory = _memory(ctx)
    hits = await asyncio.to_thread(memory.search, ctx.session_id, query, SEARCH_LIMIT + 1)
    if not hits:
        return f"No memory matches for {query.strip()!r}."
    lines = [f"{h.file}:{h.line_no}: {h.line}" for h in hits[:SEARCH_LIMIT]]
    if len(hits) > SEARCH_LIMIT:
        lines.append(f"[Showing the first {SEARCH_LIMIT} matches; use more words to narrow the search.]")
    return "\n".join(lines)


@tool
async def memory_get(ctx: ToolContext, date: str = "") -> str:
    """Return this conversation's daily memory file for a date (summaries of earlier, trimmed conversation).

    Args:
        date: the day as YYYY-MM-DD; empty means today in the bot's time zone
    """
    memory = _memory(ctx)
    day = date.strip() or memory.today()
    if not valid_date(day):
        return f"Not a valid date: {date!r}. Use the form YYYY-MM-DD, e.g. {memory.today()}."
    text = await asyncio.to_thread(memory.read, ctx.session_id, day)
    if text is None or not text.strip():
        return f"No memory file for {day}."
    return text


MEMORY_TOOLS = [memory_search, memory_get]
