"""The ``history_search`` tool: full-text search over the calling session's whole stored history.

Unlike ``memory_search`` (the summaries and notes), this reads what was actually said, including turns
long trimmed or cleared from the context, until cleanup or ``/forget`` deletes them: by words
(store/history_search.py) and, with ``memory_embedding_model`` set, by meaning too (memory/history_index.py).
The turn being answered is left out: the question is not its own answer.

The store comes with the call's context (``ctx.store``, which the app's plugins fill from its services).
"""

from __future__ import annotations

import logging
from datetime import tzinfo
from typing import TYPE_CHECKING

from agent.tools.base import ToolContext, tool
from store.history_search import HistoryHit

if TYPE_CHECKING:
    from memory.history_index import HistoryIndex
    from store.store import Store

logger = logging.getLogger(__name__)

#: Hits asked of the search; the output shows, best first, as many as :data:`OUTPUT_CHARS` hold.
RESULT_LIMIT = 30
#: The output's characters. More, shorter results find more than ten results each with the turns around it in the
#: same characters (LoCoMo, bench/memory_locomo.py: BENCHMARKS.md); 2,200 is below that older output's median.
OUTPUT_CHARS = 2200
#: The first hits shown with the turns just before and after them (that say something).
NEAR_HITS = 1


@tool
async def history_search(ctx: ToolContext, query: str) -> str:
    """Search everything said in this conversation (both sides), including turns no longer in your context.

    Returns the most relevant messages, best first: date and time, who said it, the part of the message
    that matches, and for the best one the turns just before and after it. Any language; finds the words
    and, where the bot has an embedding model, what they mean ("what is my job?" finds "I work as a nurse").

    Args:
        query: words to look for, e.g. "Alice flight number" or "猫 名字"
    """
    if not query.strip():
        return "Give a non-empty query to search the conversation history."
    store = ctx.store
    if store is None:
        raise RuntimeError("history_search needs the conversation store in its context")
    index = ctx.services.history_index if ctx.services is not None else None
    hits = await find(store, index, ctx.session_id, query, ctx.turn_start_seq or None)
    if not hits:
        return f"No messages in this conversation's history match {query.strip()!r}."
    return format_hits(hits, ctx.config.zone())


async def find(store: Store, index: HistoryIndex | None, session_id: str, query: str,
               before: int | None) -> list[HistoryHit]:
    """The hits the tool shows: by words and meaning with a history index (memory/history_index.py), else by
    words."""
    if index is not None:
        return await index.search(session_id, query, RESULT_LIMIT, before, near=NEAR_HITS)
    return await store.sessions.search_history(session_id, query, RESULT_LIMIT, before_seq=before)


def format_hits(hits: list[HistoryHit], zone: tzinfo, budget: int | None = None, near: int | None = None) -> str:
    """The tool's text: per hit, best first, its date, role and passage, then (for the first ``near`` hits,
    :data:`NEAR_HITS`) the turns just before and after it that say something, as many hits as ``budget``
    characters hold (:data:`OUTPUT_CHARS`; the best hit whatever its length). A turn already shown whole (a hit
    shown as the neighbour of a better one, or a neighbour two hits share) is not shown again."""
    budget = OUTPUT_CHARS if budget is None else budget
    near = NEAR_HITS if near is None else near
    whole: set[int] = set()  # the seqs shown whole
    blocks: list[str] = []
    used = 0
    for hit in hits:
        if hit.seq in whole:
            continue
        lines = [f"{hit.created_at.astimezone(zone):%Y-%m-%d %H:%M} {hit.role}: {hit.passage}"]
        beside = [(label, n) for label, n in (("before", hit.before), ("after", hit.after))
                  if n is not None and n.seq not in whole] if len(blocks) < near else []
        lines += [f"    {label}, {n.role}: {n.text}" for label, n in beside]
        block = "\n".join(lines)
        if blocks and used + 1 + len(block) > budget:
            continue  # a shorter one further down may fit
        blocks.append(block)
        used += len(block) + 1
        whole.update(n.seq for n in [hit, *(n for _, n in beside)]
                     if not (n.passage if isinstance(n, HistoryHit) else n.text).endswith("…"))
    return "\n".join(blocks)
