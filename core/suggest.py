"""The one "did you mean": the nearest known name to a misspelt one."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable

#: How alike two names must be (difflib's ratio) for one to be suggested for the other.
CUTOFF = 0.6


def nearest(word: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``word``, if one is close enough."""
    matches = difflib.get_close_matches(word, list(known), n=1, cutoff=CUTOFF)
    return matches[0] if matches else None


def did_you_mean(word: str, known: Iterable[str], shown: Callable[[str], str] = str) -> str:
    """``"; did you mean <nearest>?"`` to end an error line, the name written by ``shown``; "" when none is close."""
    hint = nearest(word, known)
    return f"; did you mean {shown(hint)}?" if hint is not None else ""


__all__ = ["CUTOFF", "did_you_mean", "nearest"]
