"""The ``memory_search``, ``memory_get`` and ``memory_write`` tools: the calling session's memory, and nothing else."""

from __future__ import annotations

import asyncio
import logging

from agent.tools.base import ToolContext, tool
from memory.daily import DailyMemory, valid_date
from memory.notes import append_note
from memory.person import PEOPLE_DIR, PersonNotes, person_of
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


def _people(ctx: ToolContext) -> PersonNotes:
    """The app's person notes (the prompt reads them through the same cache), or ones on the data folder."""
    if ctx.services is not None:
        return ctx.services.people
    return PersonNotes(ctx.data_dir / "memory" / PEOPLE_DIR)


PERSON_SCOPE_REFUSED = ("scope 'person' works only in a private chat with the person (notes about a person are "
                        "written only there); nothing was saved. Use scope 'session' for this conversation's "
                        "notes, or ask them to tell you in a private chat.")


@tool
async def memory_write(ctx: ToolContext, text: str, scope: str = "session") -> str:
    """Save a durable note, which you see in every later turn: to this conversation's notes (MEMORY.md), or with
    scope "person" in a private chat, to the notes about the person you talk with (PERSON.md), which follow them
    into their other conversations with you but never into a group conversation shared with others.

    Use it for facts worth keeping beyond the current context: the user's name, preferences, decisions,
    commitments. One short self-contained sentence per note; a note already saved is not saved twice. Use
    scope "person" only for what the person asks you to remember about themself.

    Args:
        text: the note, e.g. "Alice's budget for the trip is 2,000 EUR."
        scope: "session" (this conversation, the default) or "person" (the speaker, in a private chat only)
    """
    scope = scope.strip().lower()
    if scope == "person":
        info = ctx.info
        if info is None or info.is_group or not info.user_id:
            raise ValueError(PERSON_SCOPE_REFUSED)
        return (await _people(ctx).add(person_of(info.channel, info.user_id), text)).message()
    if scope != "session":
        raise ValueError(f"unknown scope {scope!r}: use \"session\" (this conversation) or \"person\" "
                         "(the speaker, in a private chat only); nothing was saved")
    result = await append_note(_memory(ctx), ctx.session_id, text)  # indexed through memory_written
    return result.message()


MEMORY_TOOLS = [memory_search, memory_get, memory_write]
