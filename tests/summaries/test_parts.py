"""Tests for summaries/parts.py: multi-part summarisation that always fits the summary model's window."""

from __future__ import annotations

import pytest

from core.errors import ContextOverflowError, TransientLLMError
from summaries.parts import (
    MIN_PART_TOKENS,
    SAFETY_MARGIN,
    cut_entry,
    part_budget,
    split_parts,
    summarise_entries,
)


def count(text: str) -> int:
    """A stand-in tokenizer: one token per four characters."""
    return len(text) // 4


class Model:
    """A fake summary model with a window: it overflows like a provider, and records what it was sent."""

    def __init__(self, window: int, overhead: int = 300) -> None:
        self.window = window
        self.overhead = overhead
        self.calls: list[tuple[str, bool]] = []

    async def __call__(self, text: str, merging: bool) -> str:
        self.calls.append((text, merging))
        if count(text) + self.overhead > self.window:
            raise ContextOverflowError("maximum context length exceeded", status=400)
        first = text.splitlines()[0][:20]
        return f"- {'merged' if merging else 'part'}: {first}"


def test_part_budget_is_40_percent_of_the_window_with_the_margin() -> None:
    assert part_budget(100_000, [50] * 10) == int(40_000 / SAFETY_MARGIN)
    assert part_budget(2048, [20] * 10) == int(min(2048 * 0.4, 2048 - 600) / SAFETY_MARGIN)


def test_large_entries_lower_the_share_but_not_below_the_minimum() -> None:
    window = 10_000
    assert part_budget(window, [2_000]) == int(window * (0.4 - 2_000 * SAFETY_MARGIN / window) / SAFETY_MARGIN)
    assert part_budget(window, [9_000]) == int(window * 0.15 / SAFETY_MARGIN)
    assert part_budget(100, [10]) == MIN_PART_TOKENS


def test_an_oversized_entry_is_cut_head_and_tail() -> None:
    entry = "User: " + "a" * 4000 + " END"
    cut = cut_entry(entry, 200, count)
    assert cut.startswith("User: aaa") and cut.endswith("a END")
    assert "characters left out" in cut
    assert count(cut) * SAFETY_MARGIN <= 200
    assert cut_entry("short", 200, count) == "short"


def test_split_keeps_order_and_every_part_within_the_budget() -> None:
    entries = [f"User: message {i} " + "x" * 100 for i in range(40)]
    parts = split_parts(entries, 300, count)
    assert [e for part in parts for e in part] == entries
    assert len(parts) > 1
    for part in parts:
        assert sum((count(e) + 1) * SAFETY_MARGIN for e in part) <= 300


async def test_short_text_is_one_call() -> None:
    model = Model(window=128_000)
    result = await summarise_entries(["User: hi", "Assistant: hello"], window=128_000, count=count, call=model)
    assert result == "- part: User: hi"
    assert model.calls == [("User: hi\nAssistant: hello", False)]


async def test_long_text_on_a_small_window_is_summarised_in_parts_then_merged() -> None:
    model = Model(window=2048)
    entries = [f"User: fact number {i} " + "y" * 400 for i in range(30)]
    result = await summarise_entries(entries, window=2048, count=count, call=model)
    parts = [c for c in model.calls if not c[1]]
    merges = [c for c in model.calls if c[1]]
    assert len(parts) > 1 and merges
    assert result.startswith("- merged: ")
    assert all(count(text) + model.overhead <= model.window for text, _ in model.calls)
    assert "".join(text for text, _ in parts).count("User: fact number") == 30


async def test_an_overflow_splits_further_and_never_repeats_a_request() -> None:
    # The estimate says it fits, the model disagrees (its tokenizer counts more): parts get smaller.
    model = Model(window=2048, overhead=1700)
    entries = [f"User: item {i} " + "z" * 300 for i in range(12)]
    result = await summarise_entries(entries, window=2048, count=count, call=model)
    assert result
    sent = [text for text, _ in model.calls]
    failed = [t for t in sent if count(t) + model.overhead > model.window]
    assert failed, "the first split should have overflowed"
    assert len(set(failed)) == len(failed)


async def test_nothing_worth_keeping_is_empty() -> None:
    async def none(text: str, merging: bool) -> str:
        return ""

    assert await summarise_entries(["User: hi"] * 3, window=4096, count=count, call=none) == ""


async def test_other_errors_reach_the_caller() -> None:
    async def down(text: str, merging: bool) -> str:
        raise TransientLLMError("503")

    with pytest.raises(TransientLLMError):
        await summarise_entries(["User: hi"], window=4096, count=count, call=down)


async def test_a_window_too_small_for_any_part_raises_the_overflow() -> None:
    async def always(text: str, merging: bool) -> str:
        raise ContextOverflowError("too long")

    with pytest.raises(ContextOverflowError):
        await summarise_entries(["User: " + "q" * 2000], window=256, count=count, call=always)
