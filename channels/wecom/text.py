"""WeCom's text limit: a text message carries at most 2,048 bytes of UTF-8 (the send API refuses more)."""

from __future__ import annotations

#: the longest text message content, in UTF-8 bytes
MAX_TEXT_BYTES = 2048


def _bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def split_text(text: str, limit: int = MAX_TEXT_BYTES) -> list[str]:
    """``text`` in pieces of at most ``limit`` UTF-8 bytes, cut at a blank line, a line end or a space where one
    is near, never inside a character."""
    pieces: list[str] = []
    rest = text
    while _bytes(rest) > limit:
        # the longest prefix that fits, in characters
        low, high = 0, len(rest)
        while low < high:
            mid = (low + high + 1) // 2
            if _bytes(rest[:mid]) <= limit:
                low = mid
            else:
                high = mid - 1
        cut = low
        for sep in ("\n\n", "\n", " "):
            at = rest.rfind(sep, 0, cut)
            if at > cut // 2:
                cut = at + len(sep)
                break
        pieces.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip("\n")
    if rest.strip() or not pieces:
        pieces.append(rest)
    return [p for p in pieces if p] or [""]
