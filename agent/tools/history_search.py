"""The ``history_search`` tool: full-text search over the calling session's whole stored history.

Unlike ``memory_search`` (the summaries and notes), this reads what was actually said, including turns
long trimmed or cleared from the context, until cleanup or ``/forget`` deletes them: by words
(store/history_search.py) and, with ``memory_embedding_model`` set, by meaning too (memory/history_index.py).
The turn being answered is left out: the question is not its own answer.

The store comes with the call's context (``ctx.store``, which the app's plugins fill from its services).
"""

from __future__ import annotations

import logging

from agent.tools.base import ToolContext, tool

logger = logging.getLogger(__name__)

#: Most passages one search returns.
RESULT_LIMIT = 10


@tool
async def history_search(ctx: ToolContext, query: str) -> str:
    """Search everything said in this conversation (both sides), including turns no longer in your context.

    Returns the most relevant messages, best first: date and time, who said it, the part of the message
    that matches, and the turns just before and after it. Any language; finds the words and, where the bot
    has an embedding model, what they mean ("what is my job?" finds "I work as a nurse").

    Args:
        query: words to look for, e.g. "Alice flight number" or "猫 名字"
    """
    if not query.strip():
        return "Give a non-empty query to search the conversation history."
    store = ctx.store
    if store is None:
        raise RuntimeError("history_search needs the conversation store in its context")
    index = ctx.services.history_index if ctx.services is not None else None
    before = ctx.turn_start_seq or None
    if index is not None:  # words and meaning (memory/history_index.py)
        hits = await index.search(ctx.session_id, query, RESULT_LIMIT, before)
    else:
        hits = await store.sessions.search_history(ctx.session_id, query, RESULT_LIMIT, before_seq=before)
    if not hits:
        return f"No messages in this conversation's history match {query.strip()!r}."
    zone = ctx.config.zone()
    blocks = []
    for hit in hits:
        lines = [f"{hit.created_at.astimezone(zone):%Y-%m-%d %H:%M} {hit.role}: {hit.passage}"]
        if hit.before is not None:
            lines.append(f"    before, {hit.before.role}: {hit.before.text}")
        if hit.after is not None:
            lines.append(f"    after, {hit.after.role}: {hit.after.text}")
        blocks.append("\n".join(lines))
    return "\n".join(blocks)
