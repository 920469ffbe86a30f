"""Telegram's text rules: lengths in UTF-16 units, and long replies split into messages and rendered to HTML.

Splitting is linear in the reply's length: each piece is found from where the last one ended.
"""

from __future__ import annotations

from channels.telegram.markdown import balance_fence, markdown_to_html

#: Telegram's limit for one message's text.
MAX_MESSAGE_LENGTH = 4096


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram's limits."""
    return len(text.encode("utf-16-le")) // 2


def _prefix_within(text: str, limit: int) -> int:
    """The largest index ``i`` with ``utf16_len(text[:i]) <= limit``."""
    if utf16_len(text) <= limit:
        return len(text)
    units = 0
    for i, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > limit:
            return i
    return len(text)


def _chunk_end(text: str, start: int, limit: int) -> int:
    """Where the chunk of ``text`` that starts at ``start`` ends: the whole rest if it fits ``limit`` UTF-16
    units, else after the last line end of the fitting prefix, else after its last space, else at the limit.

    Only the next ``limit`` characters are looked at (a character is at least one unit), so splitting a
    text costs time in proportion to its length.
    """
    stop = min(len(text), start + limit)
    end = start + _prefix_within(text[start:stop], limit)
    if end == len(text):
        return end
    floor = (end - start) // 4
    for sep in ("\n", " "):
        cut = text.rfind(sep, start, end) + 1
        if cut - start > floor:
            return cut
    return end


def split_text(text: str, limit: int = MAX_MESSAGE_LENGTH) -> list[str]:
    """Split into chunks of at most ``limit`` UTF-16 units: on a line end, else a space, else hard.

    Joining the chunks gives back ``text`` exactly.
    """
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = _chunk_end(text, start, limit)
        chunks.append(text[start:end])
        start = end
    return chunks


def render_piece(text: str, start: int, opener: str = "", limit: int = MAX_MESSAGE_LENGTH
                 ) -> tuple[str, str | None, str]:
    """The next message of Markdown ``text`` from ``start``: ``(source, html, opener after it)``.

    The piece is as long as fits ``limit`` UTF-16 units as HTML; a piece whose HTML is too long (escapes,
    long link targets) is cut shorter until it fits; ``html`` is None where even 256 characters do not
    fit (that piece goes as plain text). ``opener`` is the code fence a previous piece left open.
    """
    budget = limit
    while True:
        source = text[start:_chunk_end(text, start, budget)]
        balanced, next_opener = balance_fence(source, opener)
        rendered: str | None = markdown_to_html(balanced)
        size = utf16_len(rendered)
        if size <= limit:
            break
        if budget <= 256:
            rendered = None
            break
        budget = max(256, min(budget - 64, int(budget * limit / size * 0.95)))
    return source, rendered or None, next_opener


def render_chunks(text: str, limit: int = MAX_MESSAGE_LENGTH, opener: str = "") -> list[tuple[str, str | None]]:
    """Split Markdown into ``(source, html)`` pairs whose HTML fits ``limit`` UTF-16 units.

    See :func:`render_piece`. A code fence split across pieces is closed and reopened (``opener``: one
    left open before ``text``). Joining the sources gives back ``text``.
    """
    out: list[tuple[str, str | None]] = []
    start = 0
    while start < len(text):
        source, rendered, opener = render_piece(text, start, opener, limit)
        out.append((source, rendered))
        start += len(source)
    return out
