"""The ``memory_search``, ``memory_get`` and ``memory_write`` tools: the calling session's memory, and nothing else."""

from __future__ import annotations

import asyncio
import logging

from agent.tools.base import ToolContext, tool
from memory.daily import DailyMemory, valid_date
from memory.notes import append_note
from memory.search import MemorySearch, format_passages

logger = logging.getLogger(__name__)

#: Most matching lines one search returns.
SEARCH_LIMIT = 50


def _memory(ctx: ToolContext) -> DailyMemory:
    """The app's daily memory (its writes reach the indexers), or one on the data folder outside the app."""
    return ctx.memory if ctx.memory is not None else DailyMemory(ctx.data_dir / "memory", ctx.config.zone())


def _searcher(ctx: ToolContext) -> MemorySearch | None:
    """The app's memory index, when the memory_index plugin runs (else memory_search scans the files)."""
    return ctx.services.memory_search if ctx.services is not None else None


@tool
async def memory_search(ctx: ToolContext, query: str) -> str:
    """Search this conversation's memory files (daily summaries and long-term notes) by keywords and by meaning.

    A question needs no word in common with what was saved ("what is my pet called?" finds "my cat is
    Tom"). Returns the best passages, one per line, each with its file and date.

    Args:
        query: words or a question, e.g. "Alice budget" or "what is my pet called?"
    """
    if not query.strip():
        return "Give a non-empty query to search the memory files."
    searcher = _searcher(ctx)
    if searcher is not None:  # the index: keywords and meaning (memory/search.py)
        passages = await searcher.search(ctx.session_id, query)
        return format_passages(passages) if passages else f"No memory matches for {query.strip()!r}."
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


@tool
async def memory_write(ctx: ToolContext, text: str) -> str:
    """Save a durable note to this conversation's long-term notes (MEMORY.md), which you see in every later turn.

    Use it for facts worth keeping beyond the current context: the user's name, preferences, decisions,
    commitments. One short self-contained sentence per note; a note already saved is not saved twice.

    Args:
        text: the note, e.g. "Alice's budget for the trip is 2,000 EUR."
    """
    result = await append_note(_memory(ctx), ctx.session_id, text)  # indexed through memory_written
    return result.message()


MEMORY_TOOLS = [memory_search, memory_get, memory_write]
