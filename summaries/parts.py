"""Summaries on any window (DESIGN §3): OpenClaw's multi-part summarisation.

Dropped text too long for one call to the summary model is split by tokens into parts of at most 40% of
that model's window (with a 1.2 safety margin on token estimates, and a smaller share when single entries
are large), each part is summarised, then the part summaries are merged, recursively while they are still
too long. An entry larger than a part is cut first (head and tail). An overflow from the model makes the
split finer; the same request is never sent twice.

Everything here works on *entries*, the transcript lines of the dropped messages (one per message, see
:func:`summaries.text.transcript_entries`), and takes the model call as a function, so it is tested
without a model.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from core.errors import ContextOverflowError

logger = logging.getLogger(__name__)

#: A part holds at most this share of the summary model's window.
BASE_SHARE = 0.4
#: The share never drops below this, however large single entries are.
MIN_SHARE = 0.15
#: Token estimates are multiplied by this before they are compared with a budget.
SAFETY_MARGIN = 1.2
#: Entries whose average size passes this share of the window make the parts smaller.
LARGE_ENTRY_SHARE = 0.1
#: Tokens kept free for the instructions and the answer, whatever the share says.
OVERHEAD_TOKENS = 600
#: Splitting never goes below this many tokens a part (a window too small for it cannot summarise).
MIN_PART_TOKENS = 64
#: How deep merging and re-splitting may recurse before the fallback takes over.
MAX_DEPTH = 6

Count = Callable[[str], int]
#: ``call(text, merging)`` asks the model for the bullet lines of ``text``; ``merging`` says that ``text`` is
#: part summaries to merge rather than a conversation. Returns the answer, or "" for "nothing worth keeping".
Call = Callable[[str, bool], Awaitable[str]]


def rough_tokens(text: str) -> int:
    """A tokenizer-free estimate: a third of the UTF-8 bytes (4 characters of English make about one token,
    a Chinese character about one). It errs high, which only makes parts smaller; app.py passes a real one."""
    return len(text.encode("utf-8")) // 3


def part_budget(window: int, entry_tokens: list[int]) -> int:
    """Tokens one part may hold for a summary model with ``window`` tokens, given the entries' sizes."""
    share = BASE_SHARE
    if entry_tokens:
        average = sum(entry_tokens) / len(entry_tokens) * SAFETY_MARGIN
        if average > window * LARGE_ENTRY_SHARE:
            share = max(MIN_SHARE, BASE_SHARE - average / window)
    budget = int(min(window * share, window - OVERHEAD_TOKENS) / SAFETY_MARGIN)
    return max(MIN_PART_TOKENS, budget)


def cut_entry(entry: str, budget: int, count: Count) -> str:
    """``entry`` cut to about ``budget`` tokens (two thirds from its head, one third from its tail)."""
    tokens = count(entry)
    if tokens * SAFETY_MARGIN <= budget:
        return entry
    keep = max(16, int(len(entry) * budget / (tokens * SAFETY_MARGIN)) - 40)
    head, tail = keep * 2 // 3, keep // 3
    return f"{entry[:head]} [… {len(entry) - head - tail:,} characters left out …] {entry[-tail:]}"


def split_parts(entries: list[str], budget: int, count: Count) -> list[list[str]]:
    """Consecutive groups of entries, each within ``budget`` tokens (with the margin); big entries cut first."""
    parts: list[list[str]] = []
    current: list[str] = []
    used = 0.0
    for entry in entries:
        entry = cut_entry(entry, budget, count)
        tokens = (count(entry) + 1) * SAFETY_MARGIN
        if current and used + tokens > budget:
            parts.append(current)
            current, used = [], 0.0
        current.append(entry)
        used += tokens
    if current:
        parts.append(current)
    return parts


async def summarise_entries(entries: list[str], *, window: int, count: Count, call: Call,
                            merging: bool = False, depth: int = 0) -> str:
    """The bullet lines for ``entries``, in as many calls as the window needs; "" when nothing is worth keeping.

    Raises :class:`ContextOverflowError` only when even the smallest parts overflow, and any other error of
    ``call`` as it is (the caller retries or falls back).
    """
    budget = part_budget(window, [count(e) for e in entries])
    while True:
        parts = split_parts(entries, budget, count)
        try:
            summaries = [await call("\n".join(part), merging) for part in parts]
            break
        except ContextOverflowError:
            if budget <= MIN_PART_TOKENS or depth >= MAX_DEPTH:
                raise
            budget = max(MIN_PART_TOKENS, budget // 2)
            logger.info("summary part overflowed the summary model's window: splitting into parts of %d tokens",
                        budget)
    summaries = [s.strip() for s in summaries if s and s.strip()]
    if len(parts) == 1 or not summaries:
        return summaries[0] if summaries else ""
    if len(summaries) == 1:
        return summaries[0]
    merged = "\n".join(summaries)
    if depth >= MAX_DEPTH:
        return merged
    # The part summaries are merged by the model, in parts again if they are still too long together.
    return await summarise_entries(summaries, window=window, count=count, call=call, merging=True,
                                   depth=depth + 1)
